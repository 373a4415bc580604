"""Mutation testing of the checkers: planted protocol bugs against a protocol's chaos set.

A mutant is a protocol with one deliberate bug, selected by `mutation: <name>` in its config
(the protocol spec's `mutations`, each a small change at one spot of the protocol's code). The checkers
earn their keep when every mutant fails a check on some chaos schedule (the mutant is *killed*)
while the unmutated protocol passes every schedule (no false failures).

The chaos set of a protocol (`chaos_scenario(seed, protocol)`) is harness/chaos.py's.

A run is judged exactly like `splitbrain run --backend sim`: the simulator with invariant checks,
then harness.verdict.judge with the scenario's checks and bounds. A mutant is killed by a
seed when the verdict is "failed" (a check failed, not merely vacuous); a simulator exception
(an invariant assertion, a crash inside a layer) also kills it but is reported as a crash. The
unmutated protocol runs as the baseline over the same seeds, in every mode a mutant used.

Shrinking (`shrink`) is harness/shrink.py's (`splitbrain shrink`'s reductions), keeping every
change after which the same check still fails with the same seed and the unmutated protocol still
passes (`killed_by`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# The chaos set is harness.chaos's; admin_sync_available, chaos_modes, hunted and remove_steps are
# re-exported for the callers that import them here.
from splitbrain.harness.chaos import (  # noqa: F401
    admin_sync_available,
    chaos_modes,
    chaos_of,
    chaos_scenario,
    hunted,
    mutant_mode,
    mutations,
    remove_steps,
)
from splitbrain.node import protocols

# The most simulator runs one shrink may spend.
SHRINK_BUDGET = 120


# ---- one run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trial:
    """One judged run: killed or not, by which checks, or the crash that ended it."""

    seed: int
    outcome: str  # passed | failed | vacuous | crash
    failed: tuple[str, ...] = ()
    explanation: str = ""
    source: str = "generated"

    @property
    def killed(self) -> bool:
        return self.outcome in ("failed", "crash")


def with_mutation(data: dict, mutation: str | None, mode: str | None = None) -> dict:
    """A copy of a scenario dict running `mutation` (None: the unmutated protocol) and, if given,
    mode `mode` (the protocol's chaos mode_key: UNICAST3's resync)."""
    out = copy.deepcopy(data)
    config = dict(out.get("config") or {})
    config.pop("mutation", None)
    if mutation is not None:
        config["mutation"] = mutation
    if mode is not None:
        config[chaos_of(out["protocol"]).mode_key or "mode"] = mode
    out["config"] = config
    return out


def run_trial(data: dict, seed: int, *, check_invariants: bool = True, source: str = "generated") -> Trial:
    """Simulate a scenario dict with `seed` and judge it as `splitbrain run --backend sim` does."""
    from splitbrain.harness.scenario import parse_scenario
    from splitbrain.harness.sim import Simulation
    from splitbrain.harness.verdict import judge

    scenario = parse_scenario({**data, "seed": seed})
    try:
        result = Simulation(scenario, seed, check_invariants=check_invariants).run()
    except Exception as exc:  # an invariant, a livelock, an exception inside a layer
        return Trial(seed, "crash", (type(exc).__name__,), f"{type(exc).__name__}: {exc}"[:300], source)
    verdict = judge(scenario, result.all_events(), seed=seed, backend="sim", stats=result.stats)
    failed = tuple(c.name for c in verdict.checks if not c.passed and not getattr(c, "vacuous", False))
    explanation = "; ".join(f"{c.name}: {c.explanation}" for c in verdict.checks if not c.passed)[:300]
    return Trial(seed, verdict.outcome, failed, explanation, source)


# ---- shrinking --------------------------------------------------------------------------------


@dataclass
class Shrunk:
    data: dict
    runs: int
    steps_before: int
    steps_after: int


def shrink(data: dict, seed: int, still_fails: Callable[[dict], bool], budget: int = SHRINK_BUDGET) -> Shrunk:
    """A failing scenario dict shrunk by harness.shrink's reductions while `still_fails(candidate)`
    holds (for a mutant: killed_by), at most `budget` candidate runs."""
    from splitbrain.harness.shrink import Budget, shrink_with

    runs = Budget(budget)

    def counted(candidate: dict) -> bool:
        runs.spent += 1
        return still_fails(candidate)

    before = len(data.get("schedule") or [])
    best, _ = shrink_with({**copy.deepcopy(data), "seed": seed}, counted, runs)
    return Shrunk(best, runs.spent, before, len(best.get("schedule") or []))


def killed_by(check: str, seed: int, *, check_invariants: bool = True) -> Callable[[dict], bool]:
    """The shrinker's test: with the mutant the same check still fails, and without it the
    candidate passes (so what is left shows the bug, not an unfair schedule such as a partition
    whose heal was shrunk away)."""

    def still_kills(candidate: dict) -> bool:
        if check not in run_trial(candidate, seed, check_invariants=check_invariants).failed:
            return False
        unmutated = with_mutation(candidate, None)
        return run_trial(unmutated, seed, check_invariants=check_invariants).outcome == "passed"

    return still_kills


def compact(data: dict) -> str:
    """A scenario dict as short YAML-ish text: config, one line per stream and per step."""
    import yaml

    def flow(value) -> str:
        text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000).strip()
        return text.removesuffix("...").strip()  # a bare scalar gets YAML's document end marker

    config = {k: v for k, v in (data.get("config") or {}).items() if k != "mutation"}
    lines = [f"config: {flow(config)}"]
    for w in data.get("workload", []):
        what = f"{w['from']}->{w['to']} {w['rate']:g}/s"
        start = w.get("start", 0)
        if "duration" in w:
            what += f" t={start:g}..{start + w['duration']:g}"
        if "count" in w:
            what += f" count={w['count']}"
        lines.append(f"stream {what}")
    for st in data.get("schedule") or []:
        kind = next(k for k in st if k != "at")
        lines.append(f"{st['at']:g}: {kind} {flow(st[kind])}")
    return "\n".join(lines)


# ---- the campaign -----------------------------------------------------------------------------


@dataclass
class Source:
    """Where scenarios come from: the generated chaos set, or one scenario file."""

    label: str
    data: dict | None = None  # a file's scenario; None for the generated set
    admin_sync: bool | None = None  # generated set: admin SYNC steps (None: when available)
    protocol: str = protocols.DEFAULT_PROTOCOL  # the generated set's protocol (a file names its own)

    def scenario(self, seed: int, mode: str | None) -> dict:
        if self.data is None:
            return chaos_scenario(seed, self.protocol, mode=mode, admin_sync=self.admin_sync)
        return with_mutation(self.data, None, mode)

    def mode_of(self, data: dict) -> str | None:
        """The scenario's mode (its own setting, or the protocol's default)."""
        key = chaos_of(data["protocol"]).mode_key
        if key is None:
            return None
        value = (data.get("config") or {}).get(key)
        return value if value is not None else protocols.get(data["protocol"]).config({}).as_dict().get(key)


@dataclass
class MutantResult:
    name: str
    description: str
    resync: str | None  # the mode it ran in (the chaos set's mode_key: UNICAST3's resync)
    killed: bool = False
    crash: bool = False
    checks: tuple[str, ...] = ()
    seeds_tried: int = 0
    kill_seed: int | None = None
    kill_source: str | None = None
    explanation: str = ""
    shrunk: str | None = None
    shrunk_steps: tuple[int, int] | None = None
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class BaselineResult:
    runs: int = 0
    seeds: int = 0
    failures: list[dict] = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _trials(sources: list[Source], seeds: range):
    """(seed, source) in the order seeds are spent: every source for a seed, then the next seed."""
    for seed in seeds:
        for source in sources:
            yield seed, source


def hunt(
    name: str,
    sources: list[Source],
    seeds: range,
    *,
    shrink_it: bool = True,
    check_invariants: bool = True,
    advance: Callable[[int], None] = lambda n: None,
) -> MutantResult:
    """Run one mutant over the seeds until a seed kills it; shrink the killing schedule."""
    t0 = time.perf_counter()
    protocol = sources[0].protocol
    resync = mutant_mode(name, protocol)
    res = MutantResult(name, mutations(protocol).get(name, ""), resync)
    total = len(seeds) * len(sources)
    for k, (seed, source) in enumerate(_trials(sources, seeds)):
        data = with_mutation(source.scenario(seed, resync), name)
        trial = run_trial(data, seed, check_invariants=check_invariants, source=source.label)
        res.seeds_tried = k + 1
        advance(1)
        if trial.killed:
            res.killed, res.crash = True, trial.outcome == "crash"
            res.checks, res.kill_seed, res.kill_source = trial.failed, seed, source.label
            res.explanation = trial.explanation
            advance(total - k - 1)
            if shrink_it:
                shrunk = shrink(data, seed, killed_by(trial.failed[0], seed, check_invariants=check_invariants))
                res.shrunk = compact(shrunk.data)
                res.shrunk_steps = (shrunk.steps_before, shrunk.steps_after)
            else:
                res.shrunk = None
            break
    res.wall_s = time.perf_counter() - t0
    return res


def baseline_scenarios(
    sources: list[Source], seeds: range, mutants: Iterable[str]
) -> list[tuple[int, Source, str | None]]:
    """What the unmutated protocol must pass: every (seed, source) in its own mode and in every
    mode the mutants force, so each schedule a mutant met is covered."""
    out = []
    for seed, source in _trials(sources, seeds):
        data = source.scenario(seed, None)
        forced = sorted({m for m in (mutant_mode(n, data["protocol"]) for n in mutants) if m is not None})
        own = source.mode_of(data)
        for mode in [None] + [m for m in forced if m != own]:
            out.append((seed, source, mode))
    return out


def run_baseline(
    cases: list[tuple[int, Source, str | None]],
    *,
    check_invariants: bool = True,
    advance: Callable[[int], None] = lambda n: None,
) -> BaselineResult:
    t0 = time.perf_counter()
    res = BaselineResult(seeds=len({(seed, s.label) for seed, s, _ in cases}))
    for seed, source, mode in cases:
        data = with_mutation(source.scenario(seed, mode), None)
        trial = run_trial(data, seed, check_invariants=check_invariants, source=source.label)
        res.runs += 1
        advance(1)
        if trial.outcome != "passed":
            res.failures.append(
                {
                    "seed": seed,
                    "source": source.label,
                    "resync": source.mode_of(data),
                    "outcome": trial.outcome,
                    "checks": list(trial.failed),
                    "explanation": trial.explanation,
                }
            )
    res.wall_s = time.perf_counter() - t0
    return res
