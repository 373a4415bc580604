"""The registry of checks: a list of checkers, one line each (docs/extending.md, "Adding a check").

Everything that names checks reads it: run_checks, a scenario's `checks:` (KNOWN_CHECKS), the
defaults of a run without a scenario (GENERAL_CHECKS), the reference pages and the one-line
summary of what each check judged. A check kept outside this repository joins with `register`.
"""

from __future__ import annotations

from .checker import Checker
from .fifo import Fifo
from .no_duplicates import NoDuplicates
from .no_errors import NoErrors
from .no_loss import NoLoss
from .resync_traffic import ResyncTraffic
from .views_agree import ViewsAgree
from .windows_synced import WindowsSynced
from .xmit_traffic import XmitTraffic

# In the order a scenario's reference lists them. A check with a `bound_key` judges only with its
# bound from the scenario; one with `membership` only where a membership protocol runs.
REGISTRY: list[type[Checker]] = [
    Fifo,
    NoDuplicates,
    NoLoss,
    WindowsSynced,
    NoErrors,
    ViewsAgree,
    ResyncTraffic,
    XmitTraffic,
]


def register(checker: type[Checker]) -> type[Checker]:
    """Add a checker (a class following the Checker protocol); ValueError if its name is taken."""
    for attr in ("name", "bound_key", "unit", "membership", "result"):
        if not hasattr(checker, attr):
            raise ValueError(f"check {checker!r} has no {attr!r} (see harness.checks.checker.Checker)")
    if any(known.name == checker.name for known in REGISTRY if known is not checker):
        raise ValueError(f"check {checker.name!r} is already registered")
    if checker not in REGISTRY:
        REGISTRY.append(checker)
    return checker


def unregister(name: str) -> None:
    """Remove a check by name (tests that register one clean up with this)."""
    REGISTRY[:] = [checker for checker in REGISTRY if checker.name != name]


def get(name: str) -> type[Checker]:
    for checker in REGISTRY:
        if checker.name == name:
            return checker
    raise ValueError(f"unknown check {name!r}; known: {', '.join(known())}")


def known() -> tuple[str, ...]:
    """Every check a scenario's `checks:` may name."""
    return tuple(checker.name for checker in REGISTRY)


def unbounded() -> dict[str, type[Checker]]:
    """The checks that need no bound from the scenario, by name."""
    return {checker.name: checker for checker in REGISTRY if checker.bound_key is None}


def bounded() -> dict[str, type[Checker]]:
    """The checks that judge only with a bound from the scenario, by name."""
    return {checker.name: checker for checker in REGISTRY if checker.bound_key is not None}


def bound_keys() -> dict[str, str]:
    """The scenario key each bounded check reads its bound from."""
    return {checker.name: checker.bound_key for checker in REGISTRY if checker.bound_key is not None}


def membership() -> tuple[str, ...]:
    """Checks that only mean something for a stack with a membership protocol (scenario key
    `membership: gms`): they join a scenario's default checks there, and are left out where
    nothing names the checks (run_checks without names, a run directory without scenario.yaml)."""
    return tuple(checker.name for checker in REGISTRY if checker.membership)


def general() -> tuple[str, ...]:
    """The checks every run can be judged by: the default of run_checks and of runs without a scenario."""
    return tuple(checker.name for checker in REGISTRY if checker.bound_key is None and not checker.membership)


def unit(name: str) -> str:
    """How the one-line summary words what a check judged ("" for a check not registered)."""
    for checker in REGISTRY:
        if checker.name == name:
            return checker.unit
    return ""
