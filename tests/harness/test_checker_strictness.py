"""The checkers' weaknesses, reproduced in the simulator: each run here used to pass.

Every test runs a whole scenario in virtual time and judges it exactly as `splitbrain run` does
(harness.verdict.judge), so what is asserted is what a user would see.
"""

from __future__ import annotations

import pytest

from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim import simulate
from splitbrain.harness.verdict import judge


def run(
    schedule: list,
    *,
    config: dict | None = None,
    workload: list | None = None,
    duration: float = 10,
    settle: float = 5,
    checks: list | None = None,
    seed: int = 0,
):
    scenario = parse_scenario(
        {
            "name": "strict",
            "protocol": "unicast3",
            "nodes": ["A", "B"],
            "config": config or {},
            "workload": workload or [{"from": "A", "to": "B", "rate": 100, "count": 500}],
            "schedule": schedule,
            "duration": duration,
            "settle": settle,
            "checks": checks or ["fifo", "no_duplicates", "no_loss", "windows_synced"],
            "seed": seed,
        }
    )
    result = simulate(scenario)
    verdict = judge(scenario, result.all_events(), seed=scenario.seed, backend="sim", stats=result.stats)
    return {c.name: c for c in verdict.checks}, verdict


LOSSY = [{"at": 0.0, "loss": {"link": "A<->B", "p": 0.2}}, {"at": 5.0, "heal": 0}]
BROKEN = {"mutation": "ack_purges_one_more"}


def test_broken_protocol_loses_messages_under_loss():
    """ack_purges_one_more under 20 % loss, healed at 5 s: no_loss fails (the baseline of the next two)."""
    checks, verdict = run(LOSSY, config=BROKEN)
    assert not checks["no_loss"].passed and not checks["no_loss"].vacuous
    assert verdict.outcome == "failed"


@pytest.mark.parametrize(
    "late", [{"at": 9.9, "kill": "B"}, {"at": 9.9, "restart": "A"}], ids=["kill-receiver", "restart-sender"]
)
def test_late_death_after_the_heal_excuses_nothing(late):
    """Same broken run, plus a kill of B (or restart of A) 4.9 s after the heal: the messages lost
    before were owed (B was up and reachable longer than the recovery bound) and no_loss fails."""
    checks, verdict = run(LOSSY + [late], config=BROKEN)
    no_loss = checks["no_loss"]
    assert not no_loss.passed and not no_loss.vacuous, no_loss.explanation
    assert no_loss.details["recovery_bound_s"] == pytest.approx(4.5)
    assert no_loss.details["lost"]["A->B"]["count"] > 0
    assert verdict.outcome == "failed"


@pytest.mark.parametrize(
    "late", [{"at": 9.9, "kill": "B"}, {"at": 9.9, "restart": "A"}], ids=["kill-receiver", "restart-sender"]
)
def test_late_death_passes_with_the_correct_protocol(late):
    """The unbroken protocol under the same schedule loses nothing that was owed, and says what it excused."""
    checks, _verdict = run(LOSSY + [late])
    no_loss = checks["no_loss"]
    assert no_loss.passed, no_loss.explanation
    assert no_loss.judged > 0


def test_reaped_fault_free_run_passes():
    """Fault-free, 10 messages, windows reaped after 1 s idle and 1 s closing: every check passes."""
    checks, verdict = run(
        [],
        config={"conn_expiry_timeout": 1.0, "conn_close_timeout": 1.0},
        workload=[{"from": "A", "to": "B", "rate": 10, "count": 10}],
        duration=2,
        settle=8,
    )
    assert verdict.passed, {n: c.explanation for n, c in checks.items()}


def test_everything_lost_is_not_a_pass():
    """A sends 500 messages to B, which is dead from the start: no check may pass by judging nothing."""
    checks, verdict = run([{"at": 0.0, "kill": "B"}])
    assert verdict.outcome == "vacuous"
    assert all(not c.passed for name, c in checks.items() if name != "no_errors")
    assert checks["no_loss"].vacuous and checks["fifo"].vacuous
    assert "VACUOUS" in verdict.summary()
    assert "fifo nothing" in verdict.summary()


def test_summary_says_how_much_each_check_judged():
    """A clean run's summary line names the number of deliveries, owed messages and pairs judged."""
    _checks, verdict = run([])
    assert verdict.summary() == (
        "PASSED (5/5 checks passed; judged: fifo 500, no_duplicates 500, no_loss 500 owed, "
        "windows_synced 1 pairs, no_errors " + str(verdict.checks[-1].judged) + " events)"
    )
