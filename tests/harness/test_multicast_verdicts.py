"""Multicast and membership verdicts on simulator runs: each hole a planted bug used to slip
through (it must fail with the mutant and pass without), and each false alarm a correct run used to
raise (it must pass), with explanations that name the messages and the rule that excused them.

The rules (harness.checks, no_loss): a member is excused a multicast only when it was out of the
sender's reach from (nearly) the send until one of them dropped the other from its view, never
because some view lacked it; the sender's own (loopback) delivery is not owed; a join digest never
excuses what the sender addressed to a view with the joiner; xmit_traffic counts retransmissions of
any cause. windows_synced calls a run too short for the protocol's STABLE rounds inconclusive,
views_agree compares members and coordinator under static membership, and a node paused at the end
is judged like a cut.
"""

from __future__ import annotations

import pytest

from splitbrain.harness.checks import run_scenario_checks
from splitbrain.harness.mutants import with_mutation
from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim import Simulation


def _verdict(data: dict, seed: int = 1) -> dict:
    sc = parse_scenario({**data, "seed": seed})
    events = Simulation(sc, seed).run().all_events()
    return {r.name: r for r in run_scenario_checks(events, sc)}


def _failed(results: dict) -> list[str]:
    return [name for name, r in results.items() if not r.passed]


def _nakack2(schedule: list, *, duration: float = 10, config: dict | None = None, **extra) -> dict:
    return {
        "name": "multicast-verdicts",
        "protocol": "nakack2",
        "nodes": ["A", "B", "C"],
        "config": {"xmit_interval": 0.2, "stable_interval": 1.0, **(config or {})},
        "workload": [{"from": "all", "to": "all", "rate": 40, "duration": duration}],
        "schedule": schedule,
        "duration": duration,
        "settle": 6,
        "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced"],
        **extra,
    }


# ---- holes: real loss or a retransmission storm that passed ----------------------------------------


def test_a_brief_view_shrink_no_longer_hides_skipped_multicasts():
    """MCAST receivers skip seqnos 100-119 of every sender (skip_range); A's view drops C for 10 ms
    at 6 s while C is connected throughout. no_loss fails naming the skipped ids, and passes
    unmutated. (NAKACK2 under static views drops its table for C at such a shrink and, without a
    digest to restart it, never delivers C's later multicasts: a real loss no_loss reports too.)"""
    shrink = [
        {"at": 6.0, "view": {"at": "A", "members": ["A", "B"]}},
        {"at": 6.01, "view": {"at": "A", "members": ["A", "B", "C"]}},
    ]
    data = {**_nakack2(shrink), "protocol": "mcast", "config": {"xmit_interval": 0.2}}
    mutant = _verdict(with_mutation(data, "skip_range"))
    assert "no_loss" in _failed(mutant), mutant["no_loss"].explanation
    lost = mutant["no_loss"].details["lost"]
    assert set(lost) == {f"{x}->{y}" for x in "ABC" for y in "ABC" if x != y}
    assert all(info["count"] >= 20 and info["first"][0].endswith(":100") for info in lost.values())
    assert mutant["no_loss"].details["excused"]["left_view"] == 0
    clean = _verdict(data)
    assert _failed(clean) == [], {n: r.explanation for n, r in clean.items()}


@pytest.mark.parametrize("seed", [1, 2])
def test_mcast_keeps_what_a_member_dropped_by_a_brief_shrink_still_needs(seed):
    """A->C loses half its frames for a second, then A's view drops C for 10 ms. MCAST used to purge
    at once what only C had not acked, so C never got 20-odd of A's multicasts (the old left_view
    rule excused them); the dropped member's ack now holds back purging for a grace period, and
    every check passes: C was reachable, so all of it was owed."""
    schedule = [
        {"at": 5.0, "loss": {"link": "A->C", "p": 0.5}},
        {"at": 6.0, "heal": 0},
        {"at": 6.0, "view": {"at": "A", "members": ["A", "B"]}},
        {"at": 6.01, "view": {"at": "A", "members": ["A", "B", "C"]}},
    ]
    data = {**_nakack2(schedule), "protocol": "mcast", "config": {"xmit_interval": 0.5}}
    results = _verdict(data, seed)
    assert _failed(results) == [], {n: r.explanation for n, r in results.items() if not r.passed}
    assert results["no_loss"].details["excused"]["left_view"] == 0


def test_loopback_deliveries_are_not_counted_as_owed():
    """Every figure counts only what crossed the network: 3 senders x 2 others; the senders' own
    deliveries show as the loopback excuse."""
    results = _verdict(_nakack2([], duration=2))
    loss = results["no_loss"]
    sent = loss.details["excused"]["loopback"]
    assert sent == 3 * 80 and loss.judged == 2 * sent and loss.passed


def _gms_restart(**extra) -> dict:
    return {
        "name": "gms-restart",
        "protocol": "nakack2",
        "membership": "gms",
        "nodes": ["A", "B", "C"],
        "config": {"xmit_interval": 0.5, "stable_interval": 1.0},
        "workload": [{"from": "all", "to": "all", "rate": 40, "duration": 12}],
        "schedule": [{"at": 3.0, "kill": "C"}, {"at": 6.0, "restart": "C"}],
        "duration": 12,
        "settle": 8,
        "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced", "views_agree"],
        **extra,
    }


def test_an_inflated_join_digest_does_not_excuse_what_the_senders_addressed_to_the_joiner():
    """The join digest reports 3 more than known (inflated_digest): C, rejoining, never delivers
    the 3 multicasts each sender sent right after installing the view with C. They are owed (sent
    to a view with C), so no_loss fails naming them; unmutated every check passes."""
    mutant = _verdict(with_mutation(_gms_restart(), "inflated_digest"))
    assert "no_loss" in _failed(mutant)
    lost = mutant["no_loss"].details["lost"]
    assert {"A->C", "B->C"} <= set(lost) and all(info["count"] == 3 for info in lost.values())
    clean = _verdict(_gms_restart())
    assert _failed(clean) == [], {n: r.explanation for n, r in clean.items() if not r.passed}
    assert "rule join_digest" in clean["no_loss"].explanation or "join_digest" not in clean["no_loss"].details.get(
        "excused_first", {}
    )


def test_unasked_retransmissions_count_against_xmit_bound():
    """On a lossless network every retransmit run resends every held multicast (unsolicited_resend):
    no request at all, yet xmit_traffic fails naming the retransmissions and their reason; unmutated
    it passes with 0 of each."""
    data = {
        **_nakack2([{"at": 0.0, "delay": {"link": "*", "ms": 2}}], duration=3),
        "checks": ["fifo", "no_duplicates", "no_loss", "xmit_traffic"],
        "xmit_bound": 0,
    }
    mutant = _verdict(with_mutation(data, "unsolicited_resend"))
    assert _failed(mutant) == ["xmit_traffic"]
    xmit = mutant["xmit_traffic"]
    assert xmit.details["requests"] == 0 and xmit.details["retransmissions"] > 100
    assert "unsolicited" in xmit.explanation
    clean = _verdict(data)
    assert _failed(clean) == [] and clean["xmit_traffic"].details["retransmissions"] == 0


# ---- false alarms: correct runs that failed ----------------------------------------------------------


def test_suspicion_slower_than_the_recovery_bound_is_not_loss():
    """A 12 s split [[A, B], [C, D]] with fd_timeout 8: the split views come late, the merge digest
    skips what went across the cut (as designed); that pair was out of reach from each send until
    it left the sender's view, so nothing of it was owed. Every check passes."""
    data = {
        "name": "slow-suspicion",
        "protocol": "nakack2",
        "membership": "gms",
        "nodes": ["A", "B", "C", "D"],
        "config": {"xmit_interval": 0.5, "stable_interval": 1.0, "fd_timeout": 8},
        "workload": [{"from": n, "to": "all", "rate": 20, "duration": 16} for n in ("A", "C")],
        "schedule": [{"at": 1.0, "partition": [["A", "B"], ["C", "D"]]}, {"at": 13.0, "heal": "all"}],
        "duration": 16,
        "settle": 14,
        "checks": ["fifo", "no_duplicates", "no_loss", "views_agree"],
        "recovery_bound": 4.5,
    }
    results = _verdict(data)
    assert _failed(results) == [], {n: r.explanation for n, r in results.items() if not r.passed}
    loss = results["no_loss"]
    assert loss.details["excused"]["left_view"] > 100
    assert "rule left_view: C->A C:1:1, C->A C:1:2" in loss.explanation


def test_windows_synced_is_inconclusive_on_a_run_shorter_than_the_stable_rounds():
    """NAKACK2's default stable_interval (50 s): no STABLE round in a 16 s run, so no sender sees its
    multicasts acked although every member delivered everything. windows_synced judges nothing and
    names the setting instead of failing every pair."""
    data = _nakack2([], duration=10)
    data["config"] = {"xmit_interval": 0.5}
    results = _verdict(data)
    synced = results["windows_synced"]
    assert synced.vacuous and not synced.passed, synced.explanation
    assert "stable_interval 50s" in synced.explanation and len(synced.details["inconclusive"]) == 6
    assert all(results[n].passed for n in ("fifo", "no_duplicates", "no_loss"))
    short = _nakack2([], duration=10)  # stable_interval 1 s: the rounds fit, the pairs are judged
    assert _verdict(short)["windows_synced"].passed


def test_views_agree_under_static_membership_compares_members_not_view_ids():
    """B is given the same view twice more than the others: its view id is higher, members and
    coordinator agree everywhere, so views_agree passes."""
    again = [{"at": t, "view": {"at": "B", "members": ["A", "B", "C"]}} for t in (2.0, 3.0)]
    data = {**_nakack2(again, duration=5), "checks": ["no_loss", "views_agree"]}
    results = _verdict(data)
    assert results["views_agree"].passed, results["views_agree"].explanation
    assert "view ids not compared" in results["views_agree"].explanation


@pytest.mark.parametrize("membership", ["static", "gms"])
def test_a_node_paused_at_the_end_is_judged_like_a_cut(membership):
    """C is paused 2 s before the end and never resumed: it cannot install a view or report windows,
    so views_agree and windows_synced judge it like a cut (skipped, named), not as a failure."""
    data = _nakack2([{"at": 4.0, "pause": "C"}], duration=6)
    data["membership"] = membership
    data["checks"] = ["fifo", "no_duplicates", "no_loss", "windows_synced", "views_agree"]
    data["settle"] = 3 if membership == "gms" else 6
    results = _verdict(data)
    assert _failed(results) == [], {n: r.explanation for n, r in results.items() if not r.passed}
    assert results["views_agree"].details["paused"] == ["C"]
    assert results["windows_synced"].details["paused"] == ["C"]
    assert "paused at the end" in results["windows_synced"].explanation


def test_mcast_sender_restarted_behind_a_partition_tells_the_member_its_new_incarnation():
    """A restarts while C is split off; A's first multicasts of its new life never reach C, and a
    HIGHEST_SEQNO carries no incarnation, so C kept acking A's old life (more than A's new life
    sent) and A blocked on C for good. A now answers such an ack with the first message C misses,
    which carries the incarnation: C starts a new window, and nothing is lost."""
    data = {
        "name": "mcast-restart-behind-a-partition",
        "protocol": "mcast",
        "nodes": ["A", "B", "C"],
        "config": {"xmit_interval": 0.5, "capacity": 64},
        "workload": [
            {"from": "A", "to": "all", "rate": 60, "start": 0.85, "duration": 14.45},
            {"from": "B", "to": "all", "rate": 60, "start": 0.33, "duration": 8.45},
        ],
        "schedule": [
            {"at": 8.94, "partition": [["C"], ["A", "B"]]},
            {"at": 10.46, "restart": "A"},
            {"at": 11.79, "heal": 0},
        ],
        "duration": 15.3,
        "settle": 12,
        "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced"],
    }
    sc = parse_scenario({**data, "seed": 601})
    events = Simulation(sc, 601).run().all_events()
    results = {r.name: r for r in run_scenario_checks(events, sc)}
    assert _failed(results) == [], {n: r.explanation for n, r in results.items() if not r.passed}
    told = [e for e in events if e["kind"] == "retransmit" and e.get("reason") == "incarnation"]
    assert told and {e["node"] for e in told} == {"A"} and {e["peer"] for e in told} == {"C"}
