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
from splitbrain.harness.scenario import ALWAYS_CHECKS, DEFAULT_CHECKS, default_checks
from splitbrain.node import protocols

from . import schema as S

if TYPE_CHECKING:
    from .ingest import RunSource

# Checks a run without scenario.yaml is judged by (every check the harness knows).
ALL_CHECKS = GENERAL_CHECKS
# What a scenario file without `checks:` is judged by when its protocol is unknown here.
SCENARIO_DEFAULT_CHECKS = DEFAULT_CHECKS


def _default_checks(protocol, membership: str = "static") -> tuple[str, ...]:
    try:
        return default_checks(protocol, membership)
    except ValueError:
        return SCENARIO_DEFAULT_CHECKS


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
            scen = yaml.safe_load(scenario_text)
            if not isinstance(scen, dict):
                raise ValueError("not a mapping")
            config = scen.get("config") or {}
            protocol = scen.get("protocol")
            checks = list(scen.get("checks") or _default_checks(protocol, scen.get("membership") or "static"))
            checks += [c for c in ALWAYS_CHECKS if c not in checks]
            raw_expect = scen.get("expect", "pass")
            expect = f"fail:{raw_expect['fail']}" if isinstance(raw_expect, dict) else str(raw_expect)
            nodes = scen.get("nodes")
            if isinstance(nodes, int):
                nodes = [_letters(i) for i in range(nodes)]
            row.update(
                scenario=_str(scen.get("name")),
                protocol=_str(protocol),
                transport=_str(scen.get("transport")),
                seed=scen.get("seed") if isinstance(scen.get("seed"), int) else None,
                variant=_variant(protocol, config),
                nodes=[str(n) for n in nodes] if isinstance(nodes, list) else None,
                fault_types=fault_types(scen.get("schedule") or []),
                duration=_float(scen.get("duration")),
                settle=_float(scen.get("settle")),
                recovery_bound=_float(scen.get("recovery_bound")),
                resync_bound=_int(scen.get("resync_bound")),
                xmit_bound=_int(scen.get("xmit_bound")),
                config_json=json.dumps(config, sort_keys=True),
            )
        except Exception as exc:  # a broken scenario.yaml is reported, the events still count
            problems.append(f"scenario.yaml: {type(exc).__name__}: {exc}")
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


def fault_types(schedule: list) -> list[str]:
    """The kinds of fault a schedule applies ("partition-one-way", "loss", "kill", ...), or ["none"]."""
    kinds = []
    for step in schedule:
        if not isinstance(step, dict):
            continue
        for key, body in step.items():
            if key == "at" or key in _NOT_FAULTS:
                continue
            if key == "partition":
                key = "partition-two-way" if isinstance(body, list) else "partition-one-way"
            if key not in kinds:
                kinds.append(key)
    return kinds or ["none"]


def _letters(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else chr(ord("A") + i // 26 - 1) + chr(ord("A") + i % 26)


def _str(value) -> str | None:
    return None if value is None else str(value)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
