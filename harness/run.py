"""One run, one straight path: prepare the run directory, execute the scenario (the simulator or a
live runner), collect the logs, judge them, write the verdict.

Each step is its own module and none calls back into an earlier one: harness/rundir.py (prepare,
write), harness.sim or harness/runner.py (execute), harness/collect.py (collect; on the simulator
the logs are in memory and harness/afterrun.py writes them while the checks run), harness/verdict.py
(judge). Everything is written even when the run fails: whatever exists is written, verdict.json
says "outcome": "error" with the message, then the exception is re-raised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from splitbrain.harness import rundir
from splitbrain.harness.backends import BACKENDS
from splitbrain.harness.scenario import Scenario
from splitbrain.harness.verdict import Verdict, error_verdict, judge, verdict_of

if TYPE_CHECKING:
    from splitbrain.harness.runner import LiveResult
    from splitbrain.harness.sim.simulator import SimResult


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """A finished run: where it was written, what the backend produced, and the verdict."""

    run_dir: Path
    result: SimResult | LiveResult  # sim, or local and docker
    verdict: Verdict


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
    scenario, run_dir = rundir.prepare_run(scenario, seed, out, stamp)
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
            lambda: rundir.write_events(run_dir, result.events, result.timeline),
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
            rundir.write_events(run_dir, partial.events, partial.timeline)
        rundir.write_verdict(run_dir, error_verdict(scenario, exc, backend="sim", stats=stats))
        exc.add_note(f"run directory (partial): {run_dir}")
        raise
    rundir.write_verdict(run_dir, verdict)
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
    from splitbrain.harness.collect import collect_live
    from splitbrain.harness.runner import LiveRun, interrupt_handlers

    runner = None
    with interrupt_handlers():
        try:
            impl = get_backend(backend, **(backend_options or {}))
            cluster = impl.create_cluster(scenario, run_dir, seed=scenario.seed, options=cluster_options)
            runner = LiveRun(scenario, cluster, progress=progress)
            result = runner.run()
            events, result.stats = collect_live(run_dir, result.timeline, result.stats)
            verdict = judge(scenario, events, seed=scenario.seed, backend=backend, stats=result.stats)
        except BaseException as exc:
            # A second Ctrl-C must not cut the writing of what exists short.
            with signals_deferred():
                stats = {}
                if runner is not None:
                    partial = runner.result(exc)
                    stats = partial.stats
                    rundir.write_timeline(run_dir, partial.timeline)
                rundir.write_verdict(run_dir, error_verdict(scenario, exc, backend=backend, stats=stats))
                exc.add_note(f"run directory (partial): {run_dir}")
            raise
    rundir.write_verdict(run_dir, verdict)
    return RunOutcome(run_dir=run_dir, result=result, verdict=verdict)
