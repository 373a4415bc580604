"""The explorer: drawn runs on the simulator, judged, the failures shrunk and de-duplicated.

Runs go in generations of GENERATION runs. Run k of a session with explorer seed S draws from its
own random.Random("splitbrain-explore:S:k"), and a generation's results are taken in run order
once all of them are in, so a session's results depend on S and the budget only, not on how many
worker processes ran it (or whether Spark did).

- random: every run is a fresh plan from the nemesis;
- guided: a run whose behaviours (harness.explore.behaviour) add to the set seen so far enters the
  corpus; later runs are mostly mutants of corpus plans (harness.explore.nemesis.mutate), a plan
  picked in proportion to how rare its behaviours are, and some fresh draws.

A failed run (a check failed, not merely vacuous, or the simulator raised) counts when, with
`against`, the same plan and seed pass on the reference configuration (a planted bug's reference,
without `against`, is the same settings without the `mutation`). Each counted failure is
shrunk by harness.shrink (with the same reference), and kept unless a failure with the same check
and signature (the kinds and message types of the shrunk schedule's steps) was kept before.

On a live backend (`local`) a run is a real cluster, started, faulted, judged and torn down by
harness.run.run_scenario in a worker process: `jobs` workers, so at most `jobs` clusters at a
time (each draws its own loopback addresses and ports). A failing run's directory is kept under
`runs_dir` (the report shows its timeline); a passing one is removed. A Ctrl-C or SIGTERM stops the
workers, each of which tears its cluster down, and the session so far is returned. A failure of
one of splitbrain's own protocols is shrunk in the simulator (the same protocol code) and the
result confirmed live; a real implementation's (JGroups) is shrunk live with a small budget.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from splitbrain.harness.explore import nemesis
from splitbrain.harness.explore.behaviour import behaviours
from splitbrain.harness.explore.vocab import Vocabulary

GENERATION = 8
LIVE_GENERATION = 4  # live runs take seconds: the guided corpus learns after fewer of them
FRESH_SHARE = 0.1  # guided: share of runs drawn afresh rather than mutated from the corpus
SHRINK_BUDGET = 300
LIVE_SHRINK_BUDGET = 8  # live runs a real implementation's failure may spend on shrinking
SHRINK_RETRY_SEEDS = 3
TICK_S = 1.0  # how often a waiting session refreshes its progress line


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """What is explored: a protocol with settings, and the reference settings if differential."""

    protocol: str
    config: Mapping[str, Any]
    vocab: Vocabulary
    against: Mapping[str, Any] | None = None
    invariants: bool = True
    backend: str = "sim"
    # An external implementation's scenario block (protocol jgroups: stack, jar) and the
    # recovery bound its scenarios must state; None for splitbrain's own protocols.
    external: Mapping[str, Any] | None = None
    recovery_bound: float | None = None
    runs_dir: str = "runs"  # live: where run directories go

    @property
    def live(self) -> bool:
        return self.backend != "sim"

    def reference(self, data: dict) -> dict | None:
        """The run on the reference configuration: `against` laid over the settings, or, for a
        planted bug (`mutation`), the same settings without it (as harness.shrink judges)."""
        from splitbrain.harness.mutants import with_mutation
        from splitbrain.harness.shrink import with_settings

        if self.against is not None:
            return with_settings(data, self.against)
        if self.config.get("mutation"):
            return with_mutation(data, None)
        return None

    def scenario(self, plan: dict, seed: int, index: int) -> dict:
        data = nemesis.to_scenario(
            plan,
            self.vocab,
            name=f"explore-{self.protocol}-{index}",
            protocol=self.protocol,
            config=dict(self.config),
            seed=seed,
        )
        if self.external is not None:
            # A real implementation's settings are its stack: the block replaces `config`.
            del data["config"]
            data[self.protocol] = dict(self.external)
            data["recovery_bound"] = self.recovery_bound
        return data


@dataclass(frozen=True, slots=True)
class RunResult:
    index: int
    seed: int
    plan: dict
    outcome: str  # passed | failed | vacuous | crash
    failed: tuple[str, ...]
    explanation: str
    behaviours: frozenset[str]
    counted: bool  # a failure that counts (against the reference, when one is given)
    wall_s: float = 0.0
    run_dir: str | None = None  # live: the kept run directory of a failed run


@dataclass
class Finding:
    """One de-duplicated, shrunk failure."""

    check: str
    signature: str
    run: int
    seed: int
    explanation: str
    scenario: dict  # the shrunk scenario
    steps_before: int
    steps_after: int
    shrink_runs: int
    backend: str = "sim"
    yaml: str = ""
    path: str | None = None
    plan: dict | None = None  # the plan as drawn (before shrinking)
    run_dir: str | None = None  # live: the run directory of the failing run as found

    def to_dict(self) -> dict:
        return {
            "check": self.check,
            "signature": self.signature,
            "run": self.run,
            "seed": self.seed,
            "explanation": self.explanation,
            "steps_before": self.steps_before,
            "steps_after": self.steps_after,
            "shrink_runs": self.shrink_runs,
            "path": self.path,
            "rerun": rerun_command(self.path, self.backend) if self.path else None,
            "run_dir": self.run_dir,
            "scenario": self.scenario,
        }


@dataclass
class Session:
    """What an explore session did so far."""

    runs: int = 0
    failed_runs: int = 0  # counted failures, before de-duplication
    seen: set[str] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)
    duplicates: int = 0
    corpus: int = 0
    curve: list[tuple[int, int]] = field(default_factory=list)  # (runs, behaviours) per generation
    first_failure: tuple[int, float] | None = None  # (runs, wall seconds) to the first counted failure
    wall_s: float = 0.0
    running: int = 0  # runs under way (live: clusters up) when the progress line was drawn
    finishing: int = 0  # runs of the current generation done but not yet taken in (progress line)
    run_wall_s: float = 0.0  # wall seconds the finished runs took, summed (live: per-run cost)
    errors: int = 0  # live runs that could not be judged (a cluster that did not start)
    interrupted: str | None = None  # "interrupted" (Ctrl-C) or "terminated" (SIGTERM): stopped early


def rerun_command(path: str, backend: str = "sim") -> str:
    return f"splitbrain run {path} --backend {backend}"


# ---- one run ----------------------------------------------------------------------------------


def evaluate(target: Target, plan: dict, seed: int, index: int) -> RunResult:
    """Run and judge one plan (in a worker process: everything here is picklable)."""
    t0 = time.perf_counter()
    data = target.scenario(plan, seed, index)
    run_dir = None
    if target.live:
        outcome, failed, explanation, events, verdicts, run_dir = _run_live(target, data, seed)
    else:
        outcome, failed, explanation, events, verdicts = _simulate(data, seed, target.invariants)
    counted = outcome in ("failed", "crash")
    if counted:
        reference = target.reference(data)
        if reference is not None:
            counted = not trial_of(target)(reference, seed).killed
    if run_dir is not None and not counted:
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir = None
    return RunResult(
        index,
        seed,
        plan,
        outcome,
        failed,
        explanation,
        behaviours(events, verdicts),
        counted,
        time.perf_counter() - t0,
        run_dir,
    )


def trial_of(target: Target) -> Callable[[dict, int], Any]:
    """How a scenario dict is run and judged for this target: harness.mutants.Trial's."""
    from splitbrain.harness.mutants import run_trial

    if target.live:
        return LiveTrial(target.backend, target.runs_dir)
    return lambda data, seed: run_trial(data, seed, check_invariants=target.invariants)


@dataclass(frozen=True, slots=True)
class LiveTrial:
    """A scenario dict run on a live backend and judged (harness.mutants.Trial), its run
    directory removed afterwards."""

    backend: str
    runs_dir: str

    def __call__(self, data: dict, seed: int) -> Any:
        from splitbrain.harness.mutants import Trial

        outcome, failed, explanation, _, _, run_dir = _run_live_dict(self.backend, self.runs_dir, data, seed)
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
        # A run that could not be judged proves nothing: it counts as passing, so the shrinker
        # keeps nothing on its word and a reference run does not excuse a failure on it.
        return Trial(seed, "passed" if outcome == "error" else outcome, failed, explanation, "live")


def _run_live(target: Target, data: dict, seed: int):
    return _run_live_dict(target.backend, target.runs_dir, data, seed)


def _run_live_dict(backend: str, runs_dir: str, data: dict, seed: int):
    """(outcome, failed checks, explanation, events, verdicts, run directory) of one live run;
    outcome "error" when the cluster could not run it (the explanation says why)."""
    from splitbrain.harness.eventlog import read_run
    from splitbrain.harness.run import run_scenario
    from splitbrain.harness.scenario import parse_scenario

    scenario = parse_scenario({**data, "expect": "pass"})
    try:
        out = run_scenario(scenario, seed=seed, backend=backend, out=runs_dir)
        events = read_run(out.run_dir)
    except Exception as exc:  # a cluster that did not start, a node that crashed the harness's way
        notes = " ".join(getattr(exc, "__notes__", ()))
        return "error", (), f"{type(exc).__name__}: {exc} {notes}".strip()[:300], [], [], None
    verdict = out.verdict
    failed, explanation, verdicts = _judged(verdict)
    return verdict.outcome, failed, explanation, events, verdicts, str(out.run_dir)


def _simulate(data: dict, seed: int, invariants: bool):
    """(outcome, failed checks, explanation, events, verdicts) as harness.mutants.run_trial judges."""
    from splitbrain.harness.scenario import parse_scenario
    from splitbrain.harness.sim import Simulation
    from splitbrain.harness.verdict import judge

    scenario = parse_scenario(data)
    try:
        result = Simulation(scenario, seed, check_invariants=invariants).run()
    except Exception as exc:  # an invariant, a livelock, an exception inside a layer
        return "crash", (type(exc).__name__,), f"{type(exc).__name__}: {exc}"[:300], [], [("crash", type(exc).__name__)]
    events = result.all_events()
    verdict = judge(scenario, events, seed=seed, backend="sim", stats=result.stats)
    failed, explanation, verdicts = _judged(verdict)
    return verdict.outcome, failed, explanation, events, verdicts


def _judged(verdict) -> tuple[tuple[str, ...], str, list[tuple[str, str]]]:
    """(the checks that failed, not vacuously; their explanation; every check's verdict)."""
    failed = tuple(c.name for c in verdict.checks if not c.passed and not getattr(c, "vacuous", False))
    explanation = "; ".join(f"{c.name}: {c.explanation}" for c in verdict.checks if not c.passed)[:300]
    verdicts = [
        (c.name, "vacuous" if getattr(c, "vacuous", False) else ("passed" if c.passed else "failed"))
        for c in verdict.checks
    ]
    return failed, explanation, verdicts


def _evaluate_batch(target: Target, batch: list[tuple[dict, int, int]]) -> list[RunResult]:
    return [evaluate(target, plan, seed, index) for plan, seed, index in batch]


# ---- the search -------------------------------------------------------------------------------


class Corpus:
    """Plans that showed new behaviours, each with the behaviours its run showed, and how often
    every behaviour has been seen over all runs."""

    def __init__(self) -> None:
        self.entries: list[tuple[dict, frozenset[str]]] = []
        self.hits: dict[str, int] = {}

    def count(self, seen: frozenset[str]) -> None:
        for b in seen:
            self.hits[b] = self.hits.get(b, 0) + 1

    def add(self, plan: dict, seen: frozenset[str]) -> None:
        self.entries.append((plan, seen))

    def pick(self, rng: random.Random) -> dict:
        # A plan is picked in proportion to how rare its behaviours are now (AFL's energy: the sum
        # of 1/hits), so the search spends its runs next to what it has seen least.
        weights = [sum(1.0 / self.hits[b] for b in seen) + 1e-3 for _, seen in self.entries]
        return rng.choices([plan for plan, _ in self.entries], weights=weights)[0]


def _run_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"splitbrain-explore:{seed}:{index}")


def plan_for(strategy: str, vocab: Vocabulary, corpus: Corpus, seed: int, index: int) -> tuple[dict, int]:
    """Run `index`'s plan and simulator seed."""
    rng = _run_rng(seed, index)
    run_seed = rng.randrange(1 << 31)
    if strategy == "guided" and corpus.entries and rng.random() >= FRESH_SHARE:
        plan, donor = corpus.pick(rng), corpus.pick(rng)
        return nemesis.mutate(rng, vocab, plan, edits=rng.choice([1, 2, 3, 4]), donor=donor), run_seed
    return nemesis.draw(rng, vocab), run_seed


Executor = Callable[[Target, list[tuple[dict, int, int]]], list[RunResult]]


def explore(
    target: Target,
    *,
    strategy: str = "guided",
    seed: int = 0,
    runs: int | None = None,
    budget_s: float | None = None,
    jobs: int = 1,
    max_findings: int | None = None,
    shrink: bool = True,
    shrink_budget: int | None = None,
    progress: Callable[[Session, float], None] = lambda session, rate: None,
    executor: Executor | None = None,
) -> Session:
    """Explore until `runs` runs or `budget_s` seconds (or `max_findings` findings). A Ctrl-C or
    SIGTERM ends the session early (`interrupted`), every cluster torn down."""
    session = Session()
    corpus = Corpus()
    t0 = time.perf_counter()
    signatures: set[tuple[str, str]] = set()
    generation = LIVE_GENERATION if target.live else GENERATION

    def tick(done: int, running: int) -> None:
        session.running, session.finishing = running, done
        session.wall_s = time.perf_counter() - t0
        progress(session, (session.runs + done) / max(session.wall_s, 1e-9))

    try:
        with _executor(jobs, executor, target.live, tick) as execute:
            index = 0
            while True:
                if runs is not None and index >= runs:
                    break
                if budget_s is not None and time.perf_counter() - t0 >= budget_s:
                    break
                if max_findings is not None and len(session.findings) >= max_findings:
                    break
                size = generation if runs is None else min(generation, runs - index)
                batch = []
                for k in range(index, index + size):
                    plan, run_seed = plan_for(strategy, target.vocab, corpus, seed, k)
                    batch.append((plan, run_seed, k))
                index += size
                results = execute(target, batch)
                session.finishing = 0
                for result in results:
                    _take(session, corpus, signatures, target, result, t0, max_findings, shrink, shrink_budget)
                session.running = 0
                session.corpus = len(corpus.entries)
                session.curve.append((session.runs, len(session.seen)))
                session.wall_s = time.perf_counter() - t0
                progress(session, session.runs / max(session.wall_s, 1e-9))
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.runner.Terminated): the runs so far stand
        from splitbrain.harness.runner import Terminated

        session.interrupted = "terminated" if isinstance(exc, Terminated) else "interrupted"
    session.running = session.finishing = 0
    session.wall_s = time.perf_counter() - t0
    return session


def _take(
    session: Session,
    corpus: Corpus,
    signatures: set[tuple[str, str]],
    target: Target,
    result: RunResult,
    t0: float,
    max_findings: int | None,
    shrink: bool,
    shrink_budget: int | None,
) -> None:
    """One run's result into the session: behaviours, corpus, a counted failure shrunk and kept."""
    session.runs += 1
    session.run_wall_s += result.wall_s
    if result.outcome == "error":
        session.errors += 1
    new = result.behaviours - session.seen
    if new:
        session.seen |= new
        corpus.add(result.plan, result.behaviours)
    corpus.count(result.behaviours)
    if not result.counted:
        return
    session.failed_runs += 1
    if session.first_failure is None:
        session.first_failure = (session.runs, time.perf_counter() - t0)
    if max_findings is not None and len(session.findings) >= max_findings:
        _forget(result)
        return
    finding = _finding(target, result, shrink, shrink_budget)
    key = (finding.check, finding.signature)
    if key in signatures:
        session.duplicates += 1
        _forget(result)
        return
    signatures.add(key)
    session.findings.append(finding)


def _forget(result: RunResult) -> None:
    """A failed live run that is not kept as a finding leaves no run directory behind."""
    if result.run_dir:
        shutil.rmtree(result.run_dir, ignore_errors=True)


def _ignore_sigint() -> None:
    # Workers leave Ctrl-C to the explorer, which stops them with SIGTERM: a worker then tears
    # its cluster down (harness.runner.interrupt_handlers), an idle one simply ends. A handler
    # that does nothing rather than SIG_IGN, which the nodes a worker starts would inherit.
    signal.signal(signal.SIGINT, _no_op)


def _no_op(signum: int, frame: Any) -> None:
    return None


class _executor:
    """Runs batches in this process (simulator, jobs 1), in a fork pool of `jobs` workers (a
    live backend always: the clusters run in workers, at most `jobs` at a time, while this
    process keeps the progress line moving), or by `custom`."""

    def __init__(self, jobs: int, custom: Executor | None, live: bool, tick: Callable[[int, int], None]) -> None:
        self.jobs, self.custom, self.live, self.tick = jobs, custom, live, tick
        self.pool: Any = None

    def __enter__(self) -> Executor:
        if self.custom is not None:
            return self.custom
        if self.jobs <= 1 and not self.live:
            return _evaluate_batch
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
        self.pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx, initializer=_ignore_sigint)
        pool = self.pool

        def run(target: Target, batch: list[tuple[dict, int, int]]) -> list[RunResult]:
            if target.live:
                # One task a run: a worker holds one cluster at a time.
                parts = [[item] for item in batch]
            else:
                parts = [batch[i :: self.jobs] for i in range(self.jobs)]
            pending = {pool.submit(_evaluate_batch, target, part) for part in parts if part}
            results: list[RunResult] = []
            while pending:
                done, pending = wait(pending, timeout=TICK_S, return_when=FIRST_COMPLETED)
                for fut in done:
                    results.extend(fut.result())
                self.tick(len(results), min(self.jobs, len(pending)))
            return sorted(results, key=lambda r: r.index)

        return run

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        if self.pool is None:
            return
        if exc_type is not None and issubclass(exc_type, BaseException) and not issubclass(exc_type, Exception):
            # Interrupted: every worker gets SIGTERM, so a live run tears its cluster down now
            # rather than after its scenario ends.
            for pid in list(getattr(self.pool, "_processes", {}) or {}):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        self.pool.shutdown(wait=True, cancel_futures=True)


# ---- a failure, shrunk ------------------------------------------------------------------------


def signature(schedule: list[dict]) -> str:
    """The kinds (and message types, for typed drops) of a schedule's steps, heals left out."""
    parts = set()
    for step in schedule:
        kind = next(k for k in step if k != "at")
        if kind == "heal":
            continue
        body = step[kind]
        if kind == "drop" and isinstance(body, dict):
            types = body.get("type")
            action = body.get("action", "drop")
            kind = f"{action}:{types if isinstance(types, str) else ','.join(types or ['*'])}"
        parts.add(kind)
    return "+".join(sorted(parts)) or "no faults"


def _finding(target: Target, result: RunResult, shrink: bool, shrink_budget: int | None = None) -> Finding:
    data = target.scenario(result.plan, result.seed, result.index)
    check = result.failed[0] if result.outcome == "failed" else None
    steps_before = len(data["schedule"])
    scenario, runs = data, 0
    if shrink and check is not None:
        scenario, runs = _shrunk(target, {**data, "expect": {"fail": check}}, result.seed, check, shrink_budget)
    scenario = {k: v for k, v in scenario.items() if k != "expect"}
    scenario["name"] = f"explore-{target.protocol}-{check or 'crash'}-{result.index}"
    return Finding(
        check=check or f"crash:{result.failed[0] if result.failed else '?'}",
        signature=signature(scenario.get("schedule") or []),
        run=result.index,
        seed=int(scenario.get("seed", result.seed)),
        explanation=result.explanation,
        scenario=scenario,
        steps_before=steps_before,
        steps_after=len(scenario.get("schedule") or []),
        shrink_runs=runs,
        backend=target.backend,
        plan=result.plan,
        run_dir=result.run_dir,
    )


def _shrunk(target: Target, data: dict, seed: int, check: str, budget: int | None) -> tuple[dict, int]:
    """(the smallest scenario found that still fails `check`, runs spent). On the simulator, and
    for splitbrain's own protocols on a live backend too (the same protocol code), the result
    then confirmed by one live run; live, with a small budget, when the simulator does not
    reproduce the failure or the confirmation fails (timing differs), and for a real
    implementation, which has no simulator."""
    from splitbrain.harness.shrink import NothingToShrink, shrink_scenario

    options: dict[str, Any] = {
        "check_invariants": target.invariants,
        "against": target.against,
        "min_settle_s": target.vocab.settle_s,
        "keep_undos": True,
    }
    spent = 0
    if target.external is None:
        try:
            shrunk = shrink_scenario(
                data, seed, budget=budget or SHRINK_BUDGET, retry_seeds=SHRINK_RETRY_SEEDS, **options
            )
        except NothingToShrink:
            pass
        else:
            if not target.live:
                return shrunk.data, shrunk.runs
            spent = shrunk.runs
            confirmed = trial_of(target)(shrunk.data, int(shrunk.data["seed"]))
            if check in confirmed.failed:
                return shrunk.data, spent + 1
    if not target.live:
        return data, spent
    try:
        shrunk = shrink_scenario(data, seed, budget=budget or LIVE_SHRINK_BUDGET, trial=trial_of(target), **options)
    except NothingToShrink:  # the failure did not come back live: keep the run as found
        return data, spent
    return shrunk.data, spent + shrunk.runs
