"""Properties of UNICAST3 in the simulator, over fault schedules that hypothesis generates.

Two phases (STYLE 13): a safety phase with faults, then a heal and a liveness phase that must
converge within the settle budget. Every example is one seed; a failure prints the scenario and
the seed, and `splitbrain run` replays it exactly.
"""

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from splitbrain.harness.checks import run_checks
from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim import Simulation

ALL_CHECKS = ["fifo", "no_duplicates", "no_loss", "windows_synced"]
NODES = ["A", "B", "C"]
SETTLE = 12  # virtual seconds after the last heal: a few xmit_intervals, a sync and its resends

ci_settings = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None
)


def run(scenario: dict, seed: int):
    sc = parse_scenario({"protocol": "unicast3", "checks": ALL_CHECKS, "seed": seed, **scenario})
    result = Simulation(sc, seed).run()
    return {r.name: r for r in run_checks(result.all_events(), ALL_CHECKS)}


def failures(checks) -> dict:
    return {n: r.explanation for n, r in checks.items() if not r.passed}


links = st.sampled_from(["A->B", "B->A", "A<->B", "A->C", "C<->B", "*"])


@given(
    loss=st.floats(0.0, 0.3),
    dup=st.floats(0.0, 0.2),
    reorder=st.floats(0.0, 0.3),
    delay_ms=st.integers(0, 80),
    jitter_ms=st.integers(0, 40),
    resync=st.sampled_from(["sync", "timestamp", "first_seqno"]),
    seed=st.integers(0, 2**32),
)
@ci_settings
def test_lossy_duplicating_reordering_network_delivers_exactly_once_in_order(
    loss, dup, reorder, delay_ms, jitter_ms, resync, seed
):
    """Up to 30 % loss with duplication, reordering and delay: exactly once, in order, in sync."""
    scenario = {
        "name": "lossy",
        "nodes": NODES,
        "config": {"resync": resync},
        "workload": [
            {"from": "A", "to": "B", "rate": 100, "count": 150},
            {"from": "C", "to": "B", "rate": 50, "count": 60},
            {"from": "B", "to": "A", "rate": 30, "count": 40},
        ],
        "schedule": [
            {"at": 0.0, "loss": {"link": "*", "p": loss}},
            {"at": 0.0, "duplicate": {"link": "*", "p": dup}},
            {"at": 0.0, "reorder": {"link": "*", "p": reorder}},
            {"at": 0.0, "delay": {"link": "*", "ms": delay_ms, "jitter_ms": jitter_ms}},
            {"at": 3.0, "heal": "all"},
        ],
        "duration": 3,
        "settle": SETTLE,
    }
    checks = run(scenario, seed)
    assert not failures(checks), (seed, failures(checks))


@st.composite
def fault_steps(draw):
    """One fault with its own heal: a partition, a loss burst, or drops of one message type."""
    kind = draw(st.sampled_from(["oneway", "twoway", "loss", "drop"]))
    start = draw(st.floats(0.0, 3.0).map(lambda t: round(t, 2)))
    length = draw(st.floats(0.1, 4.0).map(lambda t: round(t, 2)))
    a, b = draw(st.permutations(NODES))[:2]
    if kind == "oneway":
        fault = {"partition": {"from": a, "to": b}}
    elif kind == "twoway":
        fault = {"partition": [[a], [n for n in NODES if n != a]]}
    elif kind == "loss":
        fault = {"loss": {"link": draw(links), "p": draw(st.sampled_from([0.3, 0.6, 1.0]))}}
    else:
        mtype = draw(st.sampled_from(["DATA", "ACK", "XMIT_REQ", "SYNC", "SYNC_OK", "SYNC_ACK"]))
        fault = {"drop": {"at": b, "from": a, "type": mtype, "count": draw(st.integers(1, 5))}}
    return start, length, fault


def schedule_of(steps) -> list[dict]:
    schedule = []
    for start, length, fault in steps:
        schedule.append({"at": start, **fault})
        schedule.append({"at": round(start + length, 2), "heal": len(schedule) - 1})
    schedule.append({"at": 7.5, "heal": "all"})
    return schedule


def schedule_scenario(steps, config=None, rates=(80, 40, 40)) -> dict:
    ab, bc, ca = rates
    return {
        "name": "schedule",
        "nodes": NODES,
        "config": config or {},
        "workload": [
            {"from": "A", "to": "B", "rate": ab, "duration": 6},
            {"from": "B", "to": "C", "rate": bc, "duration": 6},
            {"from": "C", "to": "A", "rate": ca, "duration": 6},
        ],
        "schedule": schedule_of(steps),
        "duration": 7.5,
        "settle": SETTLE,
    }


@pytest.mark.slow
@given(
    steps=st.lists(fault_steps(), min_size=1, max_size=5),
    seed=st.integers(0, 2**32),
    resync=st.sampled_from(["sync", "timestamp"]),
)
@ci_settings
def test_generated_fault_schedules_keep_every_property(steps, seed, resync):
    """Generated partitions, heals, loss bursts and typed drops: every check holds after the heal."""
    checks = run(schedule_scenario(steps, {"resync": resync}), seed)
    assert not failures(checks), (seed, steps, failures(checks))


@pytest.mark.slow
def test_broken_variant_is_caught_and_shrunk_to_a_few_steps():
    """Acks that purge one message too many: hypothesis finds a failing schedule and shrinks it."""
    broken = {"mutation": "ack_purges_one_more"}
    # A quarter of the traffic: the search and its shrinking run about a hundred schedules.
    light = (20, 10, 10)

    def fails(example):
        steps, seed = example
        return bool(failures(run(schedule_scenario(steps, broken, light), seed)))

    minimal = find(
        st.tuples(st.lists(fault_steps(), min_size=0, max_size=5), st.integers(0, 1000)),
        fails,
        settings=settings(
            max_examples=200,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    steps, seed = minimal
    assert len(steps) <= 2, minimal
    # The same protocol without the mutation passes the minimal schedule: the bug is the mutation.
    assert not failures(run(schedule_scenario(steps, rates=light), seed))


def test_same_seed_replays_bit_for_bit():
    """A seed is a run: the same scenario and seed give identical event logs."""
    scenario = schedule_scenario(
        [(0.5, 2.0, {"loss": {"link": "*", "p": 0.3}}), (1.0, 3.0, {"partition": {"from": "A", "to": "B"}})]
    )
    sc = parse_scenario({"protocol": "unicast3", "checks": ALL_CHECKS, "seed": 5, **scenario})
    first, second = Simulation(sc, 5).run(), Simulation(sc, 5).run()
    assert first.all_events() == second.all_events()
    assert Simulation(sc, 6).run().all_events() != first.all_events()
