"""Judging one run: run_checks walks its merged log once, in time order, feeding every checker
named (and the parts they share) through the Checker hooks, then collects their results.

Sends and deliveries are nearly every event: they go straight to the checkers that read them, a
run line (node/events.py) whole to those that take it so and as its messages, made one at a time,
to the others; the few other events go to every checker that reads them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from typing import Any

from splitbrain.node.events import RUN_VERSION

from . import registry
from .checker import CheckContext, Checker, Part, overrides
from .events import SortedLog, check_run, ordered
from .results import CheckResult


def run_checks(
    events: list[dict],
    names: Iterable[str] | None = None,
    *,
    recovery_bound_s: float | None = None,
    resync_bound: int | None = None,
    xmit_bound: int | None = None,
    ack_bounds: dict[str, tuple[str, float]] | None = None,
    bounds: dict[str, Any] | None = None,
) -> list[CheckResult]:
    """Run the named checks (GENERAL_CHECKS by default) in the given order over one merged event log.

    `recovery_bound_s` is no_loss' bound (default: default_recovery_bound_s()); scenarios resolve
    theirs from the protocol's timers (Scenario.recovery_bound). `resync_bound` is
    resync_traffic's (the scenario's `resync_bound`; without it that check judges nothing), and
    `xmit_bound` xmit_traffic's (the scenario's `xmit_bound`, likewise); `bounds` gives any
    checker's bound by its `bound_key`. `ack_bounds` maps a protocol to the time its senders may
    wait for acks and the setting behind it (node.compose.ack_bounds): windows_synced calls a pair
    that had less inconclusive."""
    names = list(registry.general()) if names is None else list(names)
    known = registry.known()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    ctx = CheckContext(
        recovery_bound_s=recovery_bound_s,
        ack_bounds=dict(ack_bounds or {}),
        bounds={"resync_bound": resync_bound, "xmit_bound": xmit_bound, **(bounds or {})},
    )
    checkers: dict[str, Checker] = {name: registry.get(name)(ctx) for name in dict.fromkeys(names)}  # type: ignore[call-arg]
    # The walk makes a tuple or two per event and no reference cycles: the collector's passes over
    # a big log (every event dict is tracked) would cost a fifth of the walk.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        walk(SortedLog(ordered(events)), [*ctx.parts.values(), *checkers.values()])
        results = {name: checker.result() for name, checker in checkers.items()}
    finally:
        if gc_was_enabled:
            gc.enable()
    return [results[name] for name in names]


def walk(log: list[dict], parts: list[Part | Checker]) -> None:
    """Feed a time-ordered log to the parts' hooks (shared parts first, as `parts` lists them)."""

    def feeding(*hooks: str) -> list:
        return [getattr(p, hooks[0]) for p in parts if any(overrides(p, hook) for hook in hooks)]

    on_send, on_deliver, on_other = feeding("see_send"), feeding("see_deliver"), feeding("see_other")
    on_send_run = feeding("see_send_run", "see_send")
    on_deliver_run = feeding("see_deliver_run", "see_deliver")
    for ev in log:
        kind = ev["kind"]
        if kind == "send":
            hot, runs = on_send, on_send_run
        elif kind == "deliver":
            hot, runs = on_deliver, on_deliver_run
        else:
            for see in on_other:
                see(ev)
            continue
        if ev.get("v") == RUN_VERSION:
            if runs:
                check_run(ev)
            for see in runs:
                see(ev)
            continue
        for see in hot:
            see(ev)


def run_scenario_checks(events: list[dict], scenario: Any, names: Iterable[str] | None = None) -> list[CheckResult]:
    """run_checks with a scenario's bounds: its checks (or `names` of them) over one merged log."""
    return run_checks(
        events,
        list(scenario.checks) if names is None else list(names),
        recovery_bound_s=scenario.recovery_bound,
        ack_bounds=scenario_ack_bounds(scenario),
        bounds={key: getattr(scenario, key, None) for key in registry.bound_keys().values()},
    )


def scenario_ack_bounds(scenario: Any) -> dict[str, tuple[str, float]]:
    """The ack bound of a scenario's protocol with its settings (node.compose.ack_bounds)."""
    from splitbrain.node.compose import ack_bounds

    return ack_bounds(scenario.protocol, dict(scenario.config or {}))


def judged_summary(results: Iterable[CheckResult]) -> str:
    """One line saying how much each check judged, e.g. "fifo 1800, no_loss 1790 owed"."""

    def judged(r: CheckResult) -> str:
        if not r.applicable:
            return "not applicable"
        return "nothing" if r.vacuous else str(r.judged) + registry.unit(r.name)

    return ", ".join(f"{r.name} {judged(r)}" for r in results)


def check_fifo(events: list[dict]) -> CheckResult:
    """fifo alone over a log (harness.checks.fifo)."""
    return run_checks(events, ["fifo"])[0]


def check_no_duplicates(events: list[dict]) -> CheckResult:
    """no_duplicates alone over a log (harness.checks.no_duplicates)."""
    return run_checks(events, ["no_duplicates"])[0]


def check_no_loss(events: list[dict], recovery_bound_s: float | None = None) -> CheckResult:
    """no_loss alone over a log (harness.checks.no_loss)."""
    return run_checks(events, ["no_loss"], recovery_bound_s=recovery_bound_s)[0]


def check_windows_synced(events: list[dict]) -> CheckResult:
    """windows_synced alone over a log (harness.checks.windows_synced)."""
    return run_checks(events, ["windows_synced"])[0]


def check_no_errors(events: list[dict]) -> CheckResult:
    """no_errors alone over a log (harness.checks.no_errors)."""
    return run_checks(events, ["no_errors"])[0]


def check_resync_traffic(events: list[dict], bound: int | None = None) -> CheckResult:
    """resync_traffic alone over a log, with its bound (harness.checks.resync_traffic)."""
    return run_checks(events, ["resync_traffic"], resync_bound=bound)[0]


def check_xmit_traffic(events: list[dict], bound: int | None = None) -> CheckResult:
    """xmit_traffic alone over a log, with its bound (harness.checks.xmit_traffic)."""
    return run_checks(events, ["xmit_traffic"], xmit_bound=bound)[0]
