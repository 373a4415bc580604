"""Judging a run: the scenario's checks over its merged event log, and the verdict they give.

Outcome: with `expect: pass` the run passes when every check passed; with `expect: {fail: X}`
it passes when check X failed (not vacuously), i.e. the bug the scenario reproduces did reproduce.
A run that did not pass only because some checks judged nothing is "vacuous", not "failed": it
proved nothing either way, and the CLI exits 1 for it as for a failure. A run that broke gets an
"error" verdict (`error_verdict`) saying why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from splitbrain.harness.scenario import Scenario


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


def error_verdict(scenario: Scenario, exc: BaseException, *, backend: str, stats: dict) -> Verdict:
    if isinstance(exc, KeyboardInterrupt):
        error = f"interrupted ({type(exc).__name__}{': ' + str(exc) if str(exc) else ''})"
    else:
        error = f"{type(exc).__name__}: {exc}"
    return Verdict(
        outcome="error", expect=scenario.expect, seed=scenario.seed, backend=backend, stats=stats, error=error
    )
