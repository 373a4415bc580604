"""`splitbrain shrink`: the smallest schedule that still fails the same check, for users.

hypothesis shrinks generated schedules inside the test suite; this does the same for any scenario
file, in the simulator, deterministically (same file, same seed, same result). The input must fail
a check with its seed (for a bug reproduction, `expect: {fail: X}`, that is check X; otherwise the
first check that failed). A candidate is kept when the same check still fails, not vacuously, with
the same seed; when the scenario runs a planted bug (`config.mutation`), the candidate must also
pass every check without it, so what is left shows the bug and not an unfair schedule (a partition
whose heal was removed fails no_loss with or without the bug). With a reference configuration
(`against`, settings laid over the scenario's config: `splitbrain explore --against`), the
candidate must likewise pass every check on the reference.

Reductions, greedy, each kept only if the failure stays (a delta-debugging pass in the style of
ddmin restricted to single deletions, which is what schedules of tens of steps need):
1. drop schedule steps, latest first, until no single step can go (a heal goes with its fault,
   and a pause, kill or injected view is tried first together with the resume, restart or full
   view that ends it);
2. drop streams (one must stay);
3. halve each stream's count and duration, and the rate of a stream that runs for a duration
   (fewest messages);
4. halve the run's duration and its settle time (shortest run; the settle time not below
   `min_settle_s`, which the explorer sets to the protocol's recovery bound);
5. drop steps once more (a shorter run may have made some pointless).

With `keep_undos` (the explorer's runs end with every fault undone) a heal, or a view giving a
node every member back, goes only with the fault it ends; with `retry_seeds` a candidate that
passes with the seed so far may fail with one of the next few seeds instead, which it then keeps.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from splitbrain.harness.mutants import remove_steps, run_trial, with_mutation
from splitbrain.node.errors import BadInput

DEFAULT_BUDGET = 300  # simulator runs one shrink may spend
MIN_DURATION_S = 0.5
MIN_SETTLE_S = 1.0


class NothingToShrink(BadInput, ValueError):
    """The input passes with this seed: there is no failure to keep."""


@dataclass
class ShrinkResult:
    data: dict  # the shrunk scenario, as a dict `splitbrain run` accepts
    check: str  # the check that fails before and after
    runs: int
    before: dict  # steps, streams, messages, duration
    after: dict
    explanation: str = ""
    log: list[str] = field(default_factory=list)


def size(data: dict) -> dict:
    """Steps, streams, planned messages and run length of a scenario dict (for before/after lines)."""
    from splitbrain.harness.scenario import parse_scenario

    sc = parse_scenario(data)
    messages = 0
    for s in sc.streams:  # expanded: one per (sender, receiver)
        messages += s.count if s.count is not None else int(round(s.rate * (s.duration or 0)))
    return {
        "steps": len(data.get("schedule") or []),
        "streams": len(data.get("workload") or []),
        "messages": messages,
        "duration": float(data["duration"]),
        "settle": float(sc.settle),
    }


Trial = Callable[[dict, int], Any]  # runs and judges a scenario dict: a harness.mutants.Trial


def sim_trial(check_invariants: bool = True) -> Trial:
    """Candidates run in the simulator (harness.mutants.run_trial)."""
    return lambda data, seed: run_trial(data, seed, check_invariants=check_invariants)


def target_check(
    data: dict, seed: int, *, check_invariants: bool = True, trial: Trial | None = None
) -> tuple[str, str]:
    """(the check the input fails, its explanation); NothingToShrink when it fails none."""
    judged = (trial or sim_trial(check_invariants))(_as_pass(data), seed)
    if judged.outcome == "crash":
        raise NothingToShrink(f"the run crashed with seed {seed} ({judged.explanation}); shrink needs a failing check")
    expected = (data.get("expect") or {}).get("fail") if isinstance(data.get("expect"), dict) else None
    if expected is not None:
        if expected in judged.failed:
            return expected, judged.explanation
        raise NothingToShrink(f"check {expected} (the scenario's expect) does not fail with seed {seed}")
    if not judged.failed:
        raise NothingToShrink(f"every check passes with seed {seed}: nothing to shrink")
    return judged.failed[0], judged.explanation


def _undoes(steps: list[dict], i: int, nodes) -> bool:
    """Is step i a heal, a resume, a restart after a kill, or a view of every node after an
    injected view at that node (what ends it)? With keep_undos these go only with the fault they
    end, so a shrunk run still ends with every fault undone."""
    step = steps[i]
    if "heal" in step or "resume" in step:
        return True
    if "restart" in step:
        # A restart ends a kill of that node; a restart of a running node is a fault of its own.
        for earlier in reversed(steps[:i]):
            if earlier.get("kill") == step["restart"]:
                return True
            if earlier.get("restart") == step["restart"]:
                return False
        return False
    view = step.get("view")
    if not isinstance(view, dict) or not isinstance(nodes, list):
        return False
    if sorted(view.get("members") or []) != sorted(nodes):
        return False
    earlier = [
        s["view"] for s in steps[:i] if isinstance(s.get("view"), dict) and s["view"].get("at") == view.get("at")
    ]
    return bool(earlier) and sorted(earlier[-1].get("members") or []) != sorted(nodes)


def _ends(steps: list[dict], i: int, nodes) -> set[int]:
    """The steps that end fault i: the next resume after a pause, the next restart after a kill,
    the next view of every node at a node after an injected view there (heals go with their
    fault by index already, harness.mutants.remove_steps)."""
    step = steps[i]
    kind = next(k for k in step if k != "at")
    if kind in ("pause", "kill"):
        undo = "resume" if kind == "pause" else "restart"
        for j in range(i + 1, len(steps)):
            if steps[j].get(undo) == step[kind]:
                return {j}
            if steps[j].get(kind) == step[kind]:
                return set()
    if kind == "view" and isinstance(step["view"], dict) and isinstance(nodes, list):
        at = step["view"].get("at")
        if sorted(step["view"].get("members") or []) == sorted(nodes):
            return set()
        for j in range(i + 1, len(steps)):
            if _undoes(steps, j, nodes) and isinstance(steps[j].get("view"), dict) and steps[j]["view"].get("at") == at:
                return {j}
    return set()


def with_settings(data: dict, settings: Mapping[str, Any]) -> dict:
    """A copy of a scenario dict with `settings` laid over its config (for an external
    implementation, whose settings are its stack: over its block, `jgroups: {stack, jar}`)."""
    from splitbrain.node import protocols

    protocol = data.get("protocol")
    if protocol in protocols.external_names():
        return {**data, protocol: {**(data.get(protocol) or {}), **settings}}
    return {**data, "config": {**(data.get("config") or {}), **settings}}


def _as_pass(data: dict) -> dict:
    """The scenario judged as `expect: pass`, so `failed` lists every check that failed."""
    return {**data, "expect": "pass"}


@dataclass
class Budget:
    """Simulator runs a shrink may spend; whoever runs a candidate counts it in `spent`."""

    most: int
    spent: int = 0

    def left(self) -> bool:
        return self.spent < self.most


def shrink_with(
    data: dict,
    still_fails: Callable[[dict], bool],
    budget: Budget,
    progress: Callable[[str], None] = lambda line: None,
    *,
    min_settle_s: float = MIN_SETTLE_S,
    keep_undos: bool = False,
) -> tuple[dict, list[str]]:
    """The reductions of the module docstring applied to `data`, each kept while
    `still_fails(candidate)` holds (a candidate that does not parse is never run), until
    `budget` is spent: (the smallest scenario dict found, one log line per candidate). The
    test decides what "the same failure" is: `splitbrain shrink`'s check (shrink_scenario), the
    mutation campaign's kill (harness.mutants.killed_by)."""
    from splitbrain.harness.scenario import ScenarioError, parse_scenario

    best = data
    log: list[str] = []

    def attempt(what: str, candidate: dict) -> bool:
        nonlocal best
        if not budget.left():
            return False
        try:
            parse_scenario(candidate)
        except ScenarioError:
            return False
        kept = still_fails(candidate)
        line = f"run {budget.spent}: {what}: {'kept' if kept else 'needed'}"
        log.append(line)
        progress(line)
        if kept:
            best = candidate
        return kept

    def drop_steps() -> None:
        changed = True
        while changed and budget.left():
            changed = False
            for i in reversed(range(len(best.get("schedule") or []))):
                steps = best.get("schedule") or []
                if i >= len(steps):
                    continue
                kind = next(k for k in steps[i] if k != "at")
                if keep_undos and _undoes(steps, i, data["nodes"]):
                    continue
                partners = _ends(steps, i, data["nodes"])
                what = f"drop step {i} ({kind} at {steps[i]['at']:g})"
                if partners:
                    # A fault goes with what ends it (a resume, a restart, the full view), so that
                    # a shrunk run still ends with every node up and every view whole.
                    both = sorted({i, *partners})
                    if attempt(f"{what} with its end", {**best, "schedule": remove_steps(steps, set(both))}):
                        changed = True
                        continue
                    if keep_undos:
                        continue
                if attempt(what, {**best, "schedule": remove_steps(steps, {i})}):
                    changed = True

    drop_steps()
    for i in reversed(range(len(best["workload"]))):
        if len(best["workload"]) > 1 and i < len(best["workload"]):
            attempt(f"drop stream {i}", {**best, "workload": [w for j, w in enumerate(best["workload"]) if j != i]})
    for key, least, integer in (("count", 1, True), ("duration", 0.1, False), ("rate", 1, False)):
        for i in range(len(best["workload"])):
            while budget.left():
                value = best["workload"][i].get(key)
                if key == "rate" and "count" in best["workload"][i]:
                    break  # with a count, a lower rate sends no fewer messages, only slower
                if value is None or value / 2 < least:
                    break
                half = max(least, int(value // 2)) if integer else round(value / 2, 2)
                stream = dict(best["workload"][i], **{key: half})
                workload = [stream if j == i else w for j, w in enumerate(best["workload"])]
                if not attempt(f"stream {i} {key} {value:g} -> {half:g}", {**best, "workload": workload}):
                    break
    for key, least in (("duration", MIN_DURATION_S), ("settle", min_settle_s)):
        while budget.left():
            value = float(best.get(key, parse_scenario(best).settle if key == "settle" else best["duration"]))
            if value / 2 < least:
                break
            if not attempt(f"{key} {value:g} -> {round(value / 2, 2):g} s", {**best, key: round(value / 2, 2)}):
                break
    drop_steps()
    return best, log


def shrink_scenario(
    data: dict,
    seed: int,
    *,
    budget: int = DEFAULT_BUDGET,
    check_invariants: bool = True,
    against: Mapping[str, Any] | None = None,
    min_settle_s: float = MIN_SETTLE_S,
    keep_undos: bool = False,
    retry_seeds: int = 0,
    progress: Callable[[str], None] = lambda line: None,
    trial: Trial | None = None,
) -> ShrinkResult:
    """Shrink a failing scenario dict (see the module docstring). Raises NothingToShrink.
    `trial` runs a candidate (default: the simulator; the explorer passes a live backend's)."""
    data = copy.deepcopy(data)
    data["seed"] = seed
    run = trial or sim_trial(check_invariants)
    check, explanation = target_check(data, seed, trial=run)
    mutated = bool((data.get("config") or {}).get("mutation"))
    before = size(data)
    runs = Budget(budget, spent=1)  # target_check ran once

    def still_fails(candidate: dict) -> bool:
        """The candidate fails with the seed so far or, with retry_seeds, with one of the next
        ones (which it then keeps: removing a probabilistic step changes what the random draws
        hit, so the same failure may need another seed)."""
        nonlocal seed
        for k in range(1 + retry_seeds):
            tried = seed + k
            if fails_with(candidate, tried):
                if tried != seed:
                    seed = tried
                    candidate["seed"] = tried
                return True
            if not runs.left():
                break
        return False

    def fails_with(candidate: dict, seed: int) -> bool:
        runs.spent += 1
        if check not in run(_as_pass(candidate), seed).failed:
            return False
        if mutated:
            runs.spent += 1
            twin = with_mutation(_as_pass(candidate), None)
            if run(twin, seed).outcome != "passed":
                return False
        if against is not None:
            runs.spent += 1
            reference = with_settings(_as_pass(candidate), against)
            if run(reference, seed).killed:
                return False
        return True

    best, log = shrink_with(data, still_fails, runs, progress, min_settle_s=min_settle_s, keep_undos=keep_undos)
    shrunk = copy.deepcopy(best)
    shrunk["seed"] = seed
    shrunk["name"] = f"{data['name']}-shrunk"
    return ShrinkResult(shrunk, check, runs.spent, before, size(shrunk), explanation, log)


def to_yaml(result: ShrinkResult, source: str, seed: int) -> str:
    """The shrunk scenario as a file `splitbrain run` accepts, with a comment saying where from."""
    b, a = result.before, result.after
    head = (
        f"# Shrunk by `splitbrain shrink {source} --seed {seed}` ({result.runs} simulator runs): the same check,\n"
        f"# {result.check}, still fails. steps {b['steps']} -> {a['steps']}, streams {b['streams']} -> "
        f"{a['streams']}, messages {b['messages']} -> {a['messages']}, duration {b['duration']:g} -> "
        f"{a['duration']:g} s.\n"
    )

    return head + dump_scenario(result.data)


def dump_scenario(data: dict) -> str:
    """A scenario dict as YAML: one flow-style line per key, stream and step."""
    import yaml

    def flow(value) -> str:
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000).strip()

    lines = []
    for key, value in data.items():
        if key in ("workload", "schedule") and isinstance(value, list):
            lines.append(f"{key}:" if value else f"{key}: []")
            lines.extend(f"  - {flow(item)}" for item in value)
        else:
            lines.append(f"{key}: {flow(value).removesuffix('...').strip()}")
    return "\n".join(lines) + "\n"
