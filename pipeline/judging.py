"""What a run is judged by: its check names and bounds, from its runs-table row.

Theory of operation. The checks of harness/checks/ walk a run's merged log once, in order, with
state keyed by node and link. The pipeline does not restate them as DataFrame operations: one
per-run judge (pipeline.tasks.run_document and stored_result_document, on the run's Arrow
columns with the kernels of pipeline.columnar and pipeline.columnar_parts, on its event dicts
with harness.checks.run_checks where those decline) gives the harness's verdicts by
construction, explanation and details included, and Spark distributes it, a run per call
(pipeline.tasks, pipeline.local_ingest, pipeline.stored). This module says what each run is
judged by: the checks its scenario names and the bounds it states, as the harness resolves them.
"""

from __future__ import annotations

import json
from typing import Any

from splitbrain.harness.checks import DEFAULT_RECOVERY_BOUND_S, GENERAL_CHECKS

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
