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
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from splitbrain.harness.explore import nemesis
from splitbrain.harness.explore.behaviour import behaviours
from splitbrain.harness.explore.vocab import Vocabulary

GENERATION = 8
FRESH_SHARE = 0.1  # guided: share of runs drawn afresh rather than mutated from the corpus
SHRINK_BUDGET = 300
SHRINK_RETRY_SEEDS = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """What is explored: a protocol with settings, and the reference settings if differential."""

    protocol: str
    config: Mapping[str, Any]
    vocab: Vocabulary
    against: Mapping[str, Any] | None = None
    invariants: bool = True

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
        return nemesis.to_scenario(
            plan,
            self.vocab,
            name=f"explore-{self.protocol}-{index}",
            protocol=self.protocol,
            config=dict(self.config),
            seed=seed,
        )


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
    yaml: str = ""
    path: str | None = None

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
            "rerun": rerun_command(self.path) if self.path else None,
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


def rerun_command(path: str) -> str:
    return f"splitbrain run {path} --backend sim"


# ---- one run ----------------------------------------------------------------------------------


def evaluate(target: Target, plan: dict, seed: int, index: int) -> RunResult:
    """Simulate and judge one plan (in a worker process: everything here is picklable)."""
    from splitbrain.harness.mutants import run_trial

    data = target.scenario(plan, seed, index)
    outcome, failed, explanation, events, verdicts = _simulate(data, seed, target.invariants)
    counted = outcome in ("failed", "crash")
    if counted:
        reference = target.reference(data)
        if reference is not None:
            counted = not run_trial(reference, seed, check_invariants=target.invariants).killed
    return RunResult(index, seed, plan, outcome, failed, explanation, behaviours(events, verdicts), counted)


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
    failed = tuple(c.name for c in verdict.checks if not c.passed and not getattr(c, "vacuous", False))
    explanation = "; ".join(f"{c.name}: {c.explanation}" for c in verdict.checks if not c.passed)[:300]
    verdicts = [
        (c.name, "vacuous" if getattr(c, "vacuous", False) else ("passed" if c.passed else "failed"))
        for c in verdict.checks
    ]
    return verdict.outcome, failed, explanation, events, verdicts


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
        return nemesis.mutate(rng, vocab, corpus.pick(rng), edits=rng.choice([1, 2, 3, 4])), run_seed
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
    progress: Callable[[Session, float], None] = lambda session, rate: None,
    executor: Executor | None = None,
) -> Session:
    """Explore until `runs` runs or `budget_s` seconds (or `max_findings` findings)."""
    session = Session()
    corpus = Corpus()
    t0 = time.perf_counter()
    signatures: set[tuple[str, str]] = set()
    with _executor(jobs, executor) as execute:
        index = 0
        while True:
            if runs is not None and index >= runs:
                break
            if budget_s is not None and time.perf_counter() - t0 >= budget_s:
                break
            if max_findings is not None and len(session.findings) >= max_findings:
                break
            size = GENERATION if runs is None else min(GENERATION, runs - index)
            batch = []
            for k in range(index, index + size):
                plan, run_seed = plan_for(strategy, target.vocab, corpus, seed, k)
                batch.append((plan, run_seed, k))
            index += size
            for result in execute(target, batch):
                session.runs += 1
                new = result.behaviours - session.seen
                if new:
                    session.seen |= new
                    corpus.add(result.plan, result.behaviours)
                corpus.count(result.behaviours)
                if not result.counted:
                    continue
                session.failed_runs += 1
                if session.first_failure is None:
                    session.first_failure = (session.runs, time.perf_counter() - t0)
                if max_findings is not None and len(session.findings) >= max_findings:
                    continue
                finding = _finding(target, result, shrink)
                key = (finding.check, finding.signature)
                if key in signatures:
                    session.duplicates += 1
                    continue
                signatures.add(key)
                session.findings.append(finding)
            session.corpus = len(corpus.entries)
            session.curve.append((session.runs, len(session.seen)))
            session.wall_s = time.perf_counter() - t0
            progress(session, session.runs / max(session.wall_s, 1e-9))
    session.wall_s = time.perf_counter() - t0
    return session


class _executor:
    """Runs batches in this process (jobs 1), in a fork pool split per job, or by `custom`."""

    def __init__(self, jobs: int, custom: Executor | None) -> None:
        self.jobs, self.custom = jobs, custom
        self.pool: Any = None

    def __enter__(self) -> Executor:
        if self.custom is not None:
            return self.custom
        if self.jobs <= 1:
            return _evaluate_batch
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
        self.pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx)
        pool = self.pool

        def run(target: Target, batch: list[tuple[dict, int, int]]) -> list[RunResult]:
            parts = [batch[i :: self.jobs] for i in range(self.jobs)]
            futures = [pool.submit(_evaluate_batch, target, part) for part in parts if part]
            results = [r for fut in futures for r in fut.result()]
            return sorted(results, key=lambda r: r.index)

        return run

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


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


def _finding(target: Target, result: RunResult, shrink: bool) -> Finding:
    data = target.scenario(result.plan, result.seed, result.index)
    check = result.failed[0] if result.outcome == "failed" else None
    steps_before = len(data["schedule"])
    if shrink and check is not None:
        from splitbrain.harness.shrink import NothingToShrink, shrink_scenario

        try:
            shrunk = shrink_scenario(
                {**data, "expect": {"fail": check}},
                result.seed,
                budget=SHRINK_BUDGET,
                check_invariants=target.invariants,
                against=target.against,
                min_settle_s=target.vocab.settle_s,
                keep_undos=True,
                retry_seeds=SHRINK_RETRY_SEEDS,
            )
            scenario, runs = shrunk.data, shrunk.runs
        except NothingToShrink:
            scenario, runs = data, 0
    else:
        scenario, runs = data, 0
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
    )
