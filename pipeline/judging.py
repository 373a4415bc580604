"""The harness's own checks, run by Spark: one task judges one run's whole log.

Theory of operation. The checks of harness/checks/ walk a run's merged log once, in order, with
state keyed by node and link (lifecycles, the fault timeline's cut links, acks per send window,
window discards). Rather than a second implementation of every rule as DataFrame operations,
which has to be kept equal to the first one by tests, the events table is grouped by run, each
group is put back in the order the harness reads a run (`seq`: time, file, line), turned back
into event dicts and judged by `harness.checks.run_checks` with the run's own check names and
recovery bound. The verdicts are therefore the harness's by construction, explanation and details
included; they are small and collected.

Spark's part is the parallelism: runs are judged in parallel across cores or executors, so a
campaign of a thousand runs costs what its largest runs cost, divided by the cores. The limit is
one run per task: the largest run must fit in one Python worker's memory (about 1 KB per event).
Executors must be able to import splitbrain (installed, or `--py-files` with a zip of pipeline,
harness and node: see docs/pipeline.md).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame

from splitbrain.harness.checks import DEFAULT_RECOVERY_BOUND_S, GENERAL_CHECKS, run_checks

from . import schema as S

# run_checks' bound keywords for one run: recovery_bound_s (no_loss), resync_bound (resync_traffic),
# xmit_bound (xmit_traffic), ack_bounds (windows_synced).
Bounds = dict[str, Any]


def bounds(meta: dict) -> Bounds:
    """A run's bounds from its runs-table row, as its scenario states them (the harness's defaults
    where it states none: no_loss' default recovery bound, no bound for the bounded checks), and
    the protocol's ack bound from its settings, as the harness resolves it."""
    return {
        "recovery_bound_s": float(meta.get("recovery_bound") or DEFAULT_RECOVERY_BOUND_S),
        "resync_bound": meta.get("resync_bound"),
        "xmit_bound": meta.get("xmit_bound"),
        "ack_bounds": _ack_bounds(meta),
    }


def _ack_bounds(meta: dict) -> dict[str, tuple[str, float]]:
    """node.compose.ack_bounds of the run's protocol and settings ({} when they cannot be read: an
    unknown protocol or settings it refuses, which the run's own metadata_error reports)."""
    from splitbrain.node.compose import ack_bounds

    try:
        config = json.loads(meta.get("config_json") or "{}")
        return ack_bounds(str(meta.get("protocol") or ""), config if isinstance(config, dict) else {})
    except ValueError:  # SettingError and an unknown protocol are ValueErrors, as is bad JSON
        return {}


def plan(meta: dict, known: tuple[str, ...]) -> tuple[list[str], Bounds]:
    """(check names, bounds) to judge a run by, from its runs-table row: its scenario's checks that
    are `known`, or, for a run without them, the general checks."""
    names = [n for n in meta.get("checks") or GENERAL_CHECKS if n in known]
    return names, bounds(meta)


def judge_events(events: list[dict], names: list[str], bound: Bounds) -> list[dict]:
    """One run's results as CheckResult.to_dict() dicts (also used for runs with no event at all)."""
    return [c.to_dict() for c in run_checks(events, names, **bound)]


def judge_runs(events: DataFrame, plans: dict[str, tuple[list[str], Bounds]]) -> dict[str, list[dict]]:
    """run_id -> its results, for every run of `events` that has a plan."""
    fields = S.FIELDS
    plans_b = events.sparkSession.sparkContext.broadcast(plans)

    def judge(item):
        run_id, rows = item
        names, bound = plans_b.value[run_id]
        ordered = sorted(rows, key=lambda r: r[0])
        evs = [{k: v for k, v in zip(fields, r[1:]) if v is not None} for r in ordered]
        return run_id, judge_events(evs, names, bound)

    keyed = (
        events.where(events.run_id.isin(list(plans)))
        .select("run_id", "seq", *fields)
        .rdd.map(lambda r: (r[0], tuple(r[1:])))
    )
    try:
        return dict(keyed.groupByKey().map(judge).collect())
    finally:
        plans_b.unpersist()
