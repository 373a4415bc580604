"""A run's row in the runs table (pipeline.schema.RUNS_SCHEMA), from the two small files of its run
directory: scenario.yaml (as the harness resolved it: name, protocol and its variant, nodes, the
schedule's fault types, checks, expect, bounds) and verdict.json (the harness's outcome, backend,
seed, the clock origin of a live run). Either may be missing or broken: the row then says why in
`metadata_error`, and the run's events still count, judged by every check.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import yaml

from splitbrain.harness.checks import GENERAL_CHECKS
from splitbrain.harness.scenario import FaultStep, Partition, ScenarioError, parse_scenario
from splitbrain.node import protocols

from . import schema as S

if TYPE_CHECKING:
    from .ingest import RunSource

# Checks a run without scenario.yaml is judged by (every check the harness knows).
ALL_CHECKS = GENERAL_CHECKS


def _variant(protocol, config: dict) -> str | None:
    """The protocol variant a run used (its spec's variant_key: UNICAST3's resync mode, NAKACK2's
    xmit_interval, MCAST's capacity), for pass rates per variant."""
    try:
        return protocols.get(protocol).variant(config)
    except ValueError:
        return None


# Schedule steps that are not faults of their own for pass rates by fault type.
_NOT_FAULTS = frozenset({"heal", "resume"})


def run_metadata(run: RunSource, scenario_text: str | None, verdict_text: str | None, now: str) -> dict:
    """The runs-table row of one run, from its scenario.yaml and verdict.json (either may be absent)."""
    row: dict[str, Any] = {f.name: None for f in S.RUNS_SCHEMA.fields}
    row.update(
        run_id=run.run_id,
        source=run.uri,
        schema_version=S.EVENT_SCHEMA_VERSION,
        event_files=len(run.event_files),
        ingested_at=now,
    )
    problems = []
    checks = list(ALL_CHECKS)
    expect = "pass"
    if scenario_text is not None:
        try:
            # The harness's own loader: the row says what the run ran, resolved as the run resolved it.
            scen = parse_scenario(yaml.safe_load(scenario_text))
            checks = list(scen.checks)
            expect = "pass" if scen.expect_fail is None else f"fail:{scen.expect_fail}"
            row.update(
                scenario=scen.name,
                protocol=scen.protocol,
                transport=scen.transport,
                seed=scen.seed,
                variant=_variant(scen.protocol, scen.config),
                nodes=list(scen.nodes),
                fault_types=fault_types(scen.schedule),
                duration=scen.duration,
                settle=scen.settle,
                recovery_bound=scen.recovery_bound,
                resync_bound=scen.resync_bound,
                xmit_bound=scen.xmit_bound,
                config_json=json.dumps(scen.config, sort_keys=True),
            )
        except (ScenarioError, yaml.YAMLError) as exc:  # a broken scenario.yaml is reported, the events still count
            why = str(exc).replace("\n", "; ")
            problems.append(f"scenario.yaml: {type(exc).__name__}: {why}")
    else:
        problems.append("no scenario.yaml (judged by every check, expect pass)")
    if verdict_text is not None:
        try:
            verdict = json.loads(verdict_text)
            stats = verdict.get("stats") if isinstance(verdict.get("stats"), dict) else {}
            row.update(
                harness_outcome=_str(verdict.get("outcome")),
                harness_failed=[str(x) for x in verdict.get("failed") or []],
                backend=_str(verdict.get("backend")),
                origin_t=0.0 if verdict.get("backend") == "sim" else _float(stats.get("origin_t")),
            )
            if row["seed"] is None and isinstance(verdict.get("seed"), int):
                row["seed"] = verdict["seed"]
        except Exception as exc:
            problems.append(f"verdict.json: {type(exc).__name__}: {exc}")
    if not run.event_files:
        problems.append("no nodes/*/events.jsonl")
    row.update(checks=checks, expect=expect, metadata_error="; ".join(problems) or None)
    return row


def fault_types(schedule: tuple[FaultStep, ...]) -> list[str]:
    """The kinds of fault a schedule applies ("partition-one-way", "loss", "kill", ...), or ["none"]."""
    kinds = []
    for step in schedule:
        key = step.kind
        if key in _NOT_FAULTS:
            continue
        if isinstance(step.params, Partition):
            key = "partition-one-way" if step.params.one_way else "partition-two-way"
        if key not in kinds:
            kinds.append(key)
    return kinds or ["none"]


def _str(value) -> str | None:
    return None if value is None else str(value)


def _float(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
