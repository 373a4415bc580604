"""The report's page: draws the figures a set of verdicts calls for, then renders
templates/report.html.j2 with jinja2 (autoescaped: run ids, explanations and quarantined lines are
text from the runs, never markup) and writes verdicts.json beside it.

A report of a few runs (fewer than CAMPAIGN_MIN_RUNS) leads with each run's verdict and evidence,
then its timelines and views; campaign plots (pass rates, per-run scatters, box plots) come only
when there are enough runs for them to mean something.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jinja2

from splitbrain.node import protocols

from ..timeline import RunTimeline
from ..verdicts import RunVerdict
from . import campaign_figures as cf
from .data import (
    CAMPAIGN_MIN_RUNS,
    MAX_TABLE_ROWS,
    MAX_VIEW_ROWS,
    blocked_rows,
    counts,
    fmt,
    latency_rows,
    overhead_rows,
    run_row,
    safe_id,
    verdict_rows,
    views_rows,
)
from .run_figures import plot_timeline

PASS_RATE_TABLES = (
    ("by_scenario", "scenario"),
    ("by_protocol", "protocol"),
    ("by_variant", "variant"),
    ("by_fault_type", "fault_type"),
)


def _text(x) -> str:
    return "" if x is None else str(x)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["text"] = _text
    env.filters["fmt"] = lambda x: _text(fmt(x))
    return env


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
    """Write <out_dir>/index.html, its PNGs in img/ and verdicts.json; returns the page's path."""
    out = Path(out_dir)
    img = out / "img"
    img.mkdir(parents=True, exist_ok=True)
    by_id = {v.run_id: v for v in verdicts}
    campaign = len(verdicts) >= CAMPAIGN_MIN_RUNS
    shown_timelines = []
    for run_id, tl in timelines.items():
        v = by_id.get(run_id)
        anchor = safe_id(run_id)
        path = plot_timeline(tl, v, img / f"timeline-{anchor}.png")
        shown_timelines.append(
            {
                "run_id": run_id,
                "anchor": anchor,
                "outcome": v.outcome if v else "",
                "image": path.name,
                "views": views_rows(tl),
            }
        )
    images: dict = {"matrix": None, "pass_rates": None, "distributions": []}
    if len(verdicts) > 1:
        images["matrix"] = cf.plot_matrix(verdicts, img / "matrix.png").name
    if summary and campaign:
        images["pass_rates"] = cf.plot_pass_rates(summary, img / "pass_rates.png").name
    if campaign:
        drawn = [
            cf.plot_latency(verdicts, img / "latency.png"),
            cf.plot_overhead(verdicts, img / "overhead.png"),
            cf.plot_heal_sync(verdicts, img / "heal_sync.png"),
        ]
    else:
        drawn = [cf.plot_latency(verdicts, img / "latency.png", per_run=False)]
    images["distributions"] = [p.name for p in drawn if p is not None]
    rows, cols = overhead_rows(verdicts)
    page = out / "index.html"
    page.write_text(
        _environment()
        .get_template("report.html.j2")
        .render(
            title=title,
            counts=counts(verdicts),
            extra=extra or {},
            campaign=campaign,
            verdicts=verdicts,
            verdict_rows=verdict_rows,
            timelines=shown_timelines,
            timeline_ids=set(timelines),
            resync_kinds=[m.kind for m in protocols.resync_marks()],
            images=images,
            summary=summary or {},
            pass_rate_tables=PASS_RATE_TABLES,
            overhead_kinds=list(protocols.overhead_kinds().values()),
            overhead={"rows": rows, "cols": cols},
            blocked=blocked_rows(verdicts),
            latency=latency_rows(verdicts),
            runs=[run_row(v) for v in verdicts],
            quarantine=quarantine or [],
            max_table_rows=MAX_TABLE_ROWS,
            max_view_rows=MAX_VIEW_ROWS,
        ),
        encoding="utf-8",
    )
    (out / "verdicts.json").write_text(
        json.dumps([v.to_dict() for v in verdicts], indent=1, default=str), encoding="utf-8"
    )
    return page
