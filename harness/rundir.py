"""Run directories and verdicts: run a scenario on a backend, judge it, write what it produced.

Both kinds of backend share this module: the simulator hands over its events in memory
(`write_events`); live backends (harness.runner over harness.backends) have their nodes write
`nodes/<name>/events.jsonl` themselves and add the harness timeline. Either way the merged log is
judged by `judge` and written by `write_verdict`.

A run directory is `runs/<scenario>-<seed>-<stamp>/` (stamp = UTC YYYYmmddTHHMMSS, with a
"-2", "-3" ... suffix if two runs start in the same second) holding:

- scenario.yaml            the resolved scenario, with the seed actually used;
- nodes/<name>/events.jsonl one event log per node, all incarnations;
- timeline.jsonl           the faults as the harness applied them;
- verdict.json             the checks (passed, explanation, details), expect, outcome, seed,
                           backend and the backend's stats.

Everything is written even when the run fails: whatever exists is written, verdict.json says
"outcome": "error" with the message, then the exception is re-raised.

Outcome: with `expect: pass` the run passes when every check passed; with `expect: {fail: X}`
it passes when check X failed (not vacuously), i.e. the bug the scenario reproduces did reproduce.
A run that did not pass only because some checks judged nothing is "vacuous", not "failed": it
proved nothing either way, and the CLI exits 1 for it as for a failure.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from splitbrain.harness import eventlog
from splitbrain.harness.backends import BACKENDS
from splitbrain.harness.scenario import Scenario
from splitbrain.node.events import RUN_VERSION, compact_runs

if TYPE_CHECKING:
    from splitbrain.harness.runner import LiveResult
    from splitbrain.harness.sim.simulator import SimResult


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The judgement of one run."""

    outcome: str  # "passed" | "failed" | "vacuous" | "error"
    expect: str | dict
    checks: tuple = ()  # CheckResult objects (harness.checks)
    seed: int = 0
    backend: str = "sim"
    stats: dict = field(default_factory=dict)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def failures(self) -> list:
        """The checks that decided a failed or vacuous outcome, for printing (name and explanation)."""
        if self.outcome not in ("failed", "vacuous"):
            return []
        if isinstance(self.expect, dict):
            return [c for c in self.checks if c.name == self.expect["fail"]]
        return [c for c in self.checks if not c.passed and getattr(c, "applicable", True)]

    def summary(self) -> str:
        if self.outcome == "error":
            return f"ERROR ({self.error})"
        from splitbrain.harness.checks import judged_summary

        judged = f"; judged: {judged_summary(self.checks)}" if self.checks else ""
        if isinstance(self.expect, dict):
            name = self.expect["fail"]
            if self.passed:
                return f"PASSED ({name} failed as expected: the bug reproduced{judged})"
            if self.outcome == "vacuous":
                return f"VACUOUS (expected {name} to fail, but it judged nothing{judged})"
            return f"FAILED (expected {name} to fail, but it passed{judged})"
        passed = sum(1 for c in self.checks if c.passed)
        word = {"passed": "PASSED", "vacuous": "VACUOUS"}.get(self.outcome, "FAILED")
        inapplicable = [c.name for c in self.checks if not getattr(c, "applicable", True)]
        applicable = len(self.checks) - len(inapplicable)
        na = f"; not applicable: {', '.join(inapplicable)}" if inapplicable else ""
        return f"{word} ({passed}/{applicable} checks passed{na}{judged})"

    def to_dict(self) -> dict:
        return {
            "outcome": self.outcome,
            "expect": self.expect,
            "checks": [c.to_dict() for c in self.checks],
            "failed": [c.name for c in self.failures],
            "seed": self.seed,
            "backend": self.backend,
            "stats": self.stats,
            "error": self.error,
        }


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """A finished run: where it was written, what the backend produced, and the verdict."""

    run_dir: Path
    result: SimResult | LiveResult  # sim, or local and docker
    verdict: Verdict


def judge(scenario: Scenario, events: list[dict], *, seed: int, backend: str, stats: dict) -> Verdict:
    """Run the scenario's checks over a merged event log and decide the outcome."""
    from splitbrain.harness.checks import run_scenario_checks

    results = run_scenario_checks(events, scenario)
    return verdict_of(scenario, results, seed=seed, backend=backend, stats=stats)


def verdict_of(scenario: Scenario, results: Iterable, *, seed: int, backend: str, stats: dict) -> Verdict:
    """The verdict from the scenario's check results (CheckResult objects, in its order)."""
    results = tuple(results)
    return Verdict(
        outcome=outcome_of(results, scenario.expect_fail),
        expect=scenario.expect,
        checks=results,
        seed=seed,
        backend=backend,
        stats=stats,
    )


def outcome_of(results, expect_fail: str | None) -> str:
    """passed / failed / vacuous from check results (CheckResult objects) and the expectation.
    A check that is not applicable to the run (`applicable` false) takes no part in it."""
    results = [c for c in results if getattr(c, "applicable", True)]
    if expect_fail is None:
        if all(c.passed for c in results):
            return "passed"
        return "failed" if any(not c.passed and not c.vacuous for c in results) else "vacuous"
    target = [c for c in results if c.name == expect_fail]
    if any(not c.passed and not c.vacuous for c in target):
        return "passed"
    return "vacuous" if any(c.vacuous for c in target) else "failed"


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


def error_verdict(scenario: Scenario, exc: BaseException, *, backend: str, stats: dict) -> Verdict:
    if isinstance(exc, KeyboardInterrupt):
        error = f"interrupted ({type(exc).__name__}{': ' + str(exc) if str(exc) else ''})"
    else:
        error = f"{type(exc).__name__}: {exc}"
    return Verdict(
        outcome="error", expect=scenario.expect, seed=scenario.seed, backend=backend, stats=stats, error=error
    )


def count_messages(events: list[dict]) -> tuple[int, int]:
    """Application messages sent (first sends) and delivered in a merged log."""
    sent = delivered = 0
    for ev in events:
        kind = ev["kind"]
        if "app" in ev:
            # A run line (node/events.py) stands for `count` messages.
            n = ev["count"] if ev.get("v") == RUN_VERSION else 1
            if kind == "send":
                sent += n
            elif kind == "deliver":
                delivered += n
    return sent, delivered


def run_scenario(
    scenario: Scenario,
    *,
    seed: int | None = None,
    backend: str = "sim",
    out: str | os.PathLike = "runs",
    stamp: str | None = None,
    progress=None,
    cluster_options=None,
    backend_options: dict | None = None,
    workers: int = 1,
    **sim_options,
) -> RunOutcome:
    """Run a scenario on a backend, judge it and write the run directory.

    `sim_options` go to harness.sim.Simulation (stack_factory, codec, check_invariants,
    max_steps, ...). `workers` is for the sim backend too: with 2, a forked process writes the
    event logs and runs part of the checks while this one runs the rest (harness.afterrun).
    `progress` (a callable taking harness.runner.Progress) and `cluster_options`
    (harness.backends.ClusterOptions) are for live backends, and so are
    `backend_options` (keyword arguments of the backend, e.g. DockerBackend's client or image).
    A scenario that the backend cannot run (toxic steps off docker, an injector it lacks) raises
    ScenarioError before anything starts. Raises what the backend raises (KeyboardInterrupt
    included), after writing what exists.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    from splitbrain.harness.scenario import check_backend

    check_backend(scenario, backend, getattr(cluster_options, "injector", None))
    scenario, run_dir = prepare_run(scenario, seed, out, stamp)
    if backend == "sim":
        return _run_sim(scenario, run_dir, workers, **sim_options)
    if sim_options:
        raise ValueError(f"options {', '.join(sorted(sim_options))} are for the sim backend only")
    return _run_live(
        scenario, run_dir, backend, progress=progress, cluster_options=cluster_options, backend_options=backend_options
    )


def _run_sim(scenario: Scenario, run_dir: Path, workers: int = 1, **sim_options) -> RunOutcome:
    from splitbrain.harness.afterrun import write_and_check
    from splitbrain.harness.sim import Simulation

    seed = scenario.seed
    sim = None
    try:
        sim = Simulation(scenario, seed, **sim_options)
        result = sim.run()
        results = write_and_check(
            lambda: write_events(run_dir, result.events, result.timeline),
            result.all_events(),
            scenario,
            workers=workers,
        )
        verdict = verdict_of(scenario, results, seed=seed, backend="sim", stats=result.stats)
    except BaseException as exc:
        stats: dict = {}
        if sim is not None:
            partial = sim.result(exc)
            stats = partial.stats
            write_events(run_dir, partial.events, partial.timeline)
        write_verdict(run_dir, error_verdict(scenario, exc, backend="sim", stats=stats))
        exc.add_note(f"run directory (partial): {run_dir}")
        raise
    write_verdict(run_dir, verdict)
    return RunOutcome(run_dir=run_dir, result=result, verdict=verdict)


def _run_live(
    scenario: Scenario,
    run_dir: Path,
    backend: str,
    *,
    progress=None,
    cluster_options=None,
    backend_options: dict | None = None,
) -> RunOutcome:
    """A run on real nodes (harness.runner): the nodes write their own logs into run_dir."""
    from splitbrain.harness.backends import get_backend, signals_deferred
    from splitbrain.harness.eventlog import read_run
    from splitbrain.harness.runner import LiveRun, interrupt_handlers

    runner = None
    with interrupt_handlers():
        try:
            impl = get_backend(backend, **(backend_options or {}))
            cluster = impl.create_cluster(scenario, run_dir, seed=scenario.seed, options=cluster_options)
            runner = LiveRun(scenario, cluster, progress=progress)
            result = runner.run()
            _write_timeline(run_dir, result.timeline)
            events = read_run(run_dir)
            stats = dict(result.stats)
            stats["msgs_sent"], stats["msgs_delivered"] = count_messages(events)
            result.stats = stats
            verdict = judge(scenario, events, seed=scenario.seed, backend=backend, stats=stats)
        except BaseException as exc:
            # A second Ctrl-C must not cut the writing of what exists short.
            with signals_deferred():
                stats = {}
                if runner is not None:
                    partial = runner.result(exc)
                    stats = partial.stats
                    _write_timeline(run_dir, partial.timeline)
                write_verdict(run_dir, error_verdict(scenario, exc, backend=backend, stats=stats))
                exc.add_note(f"run directory (partial): {run_dir}")
            raise
    write_verdict(run_dir, verdict)
    return RunOutcome(run_dir=run_dir, result=result, verdict=verdict)


def _write_timeline(run_dir: Path, timeline: list[dict]) -> None:
    eventlog.write_events(run_dir / "timeline.jsonl", timeline)


def _json_default(value):
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)
