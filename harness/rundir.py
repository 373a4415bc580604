"""Run directories: made before a run starts, filled as it ends.

A run directory is `runs/<scenario>-<seed>-<stamp>/` (stamp = UTC YYYYmmddTHHMMSS, with a
"-2", "-3" ... suffix if two runs start in the same second) holding:

- scenario.yaml            the resolved scenario, with the seed actually used;
- nodes/<name>/events.jsonl one event log per node, all incarnations;
- timeline.jsonl           the faults as the harness applied them;
- verdict.json             the checks (passed, explanation, details), expect, outcome, seed,
                           backend and the backend's stats.

`prepare_run` makes the directory and writes scenario.yaml; the simulator's logs are written by
`write_events`, a live run's nodes write their own and the harness adds `write_timeline`;
`write_verdict` writes the judgement (harness.verdict). harness/run.py puts the steps in order.
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from splitbrain.harness import eventlog
from splitbrain.harness.scenario import Scenario
from splitbrain.node.events import compact_runs

if TYPE_CHECKING:
    from splitbrain.harness.verdict import Verdict


def run_stamp(now: datetime | None = None) -> str:
    now = now if now is not None else datetime.now(UTC)
    return now.astimezone(UTC).strftime("%Y%m%dT%H%M%S")


def make_run_dir(out: str | os.PathLike, scenario_name: str, seed: int, stamp: str | None = None) -> Path:
    """Create and return a fresh `<out>/<scenario>-<seed>-<stamp>[-N]/` directory."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    base = f"{scenario_name}-{seed}-{stamp or run_stamp()}"
    for n in range(1, 1000):
        path = out / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"too many run directories named {base}* in {out}")


def write_scenario(run_dir: Path, scenario: Scenario) -> None:
    (run_dir / "scenario.yaml").write_text(scenario.to_yaml(), encoding="utf-8")


def write_events(run_dir: Path, node_events: dict[str, list[dict]], timeline: list[dict]) -> None:
    """nodes/<name>/events.jsonl for every node and timeline.jsonl."""
    for name, events in node_events.items():
        # Runs of sends and deliveries as one line each (node/events.py), as a live node writes.
        eventlog.write_events(run_dir / "nodes" / name / "events.jsonl", compact_runs(events))
    eventlog.write_events(run_dir / "timeline.jsonl", timeline)


def write_verdict(run_dir: Path, verdict: Verdict) -> None:
    text = json.dumps(verdict.to_dict(), indent=2, sort_keys=False, default=_json_default)
    (run_dir / "verdict.json").write_text(text + "\n", encoding="utf-8")


def prepare_run(
    scenario: Scenario, seed: int | None, out: str | os.PathLike, stamp: str | None = None
) -> tuple[Scenario, Path]:
    """The scenario with the seed actually used, and a fresh run directory holding it."""
    seed = scenario.seed if seed is None else seed
    scenario = dataclasses.replace(scenario, seed=seed)
    run_dir = make_run_dir(out, scenario.name, seed, stamp)
    write_scenario(run_dir, scenario)
    return scenario, run_dir


def write_timeline(run_dir: Path, timeline: list[dict]) -> None:
    eventlog.write_events(run_dir / "timeline.jsonl", timeline)


def _json_default(value):
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)
